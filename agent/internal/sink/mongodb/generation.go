package mongodb

import (
	"context"
	"fmt"
	"strconv"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"kollect.dev/agent/internal/export"
)

// Generations make an export all or nothing for readers, on servers without multi-document
// transactions (FerretDB v1, a standalone mongod) as on replica sets: one reader query for
// every deployment.
//
// Every export that changes rows is a generation of its (cluster, inventory), numbered from 1
// in the state document. An export to generation g+1 never changes a document that
// generation g shows: it inserts the new version of each added or changed row as a new
// document (gen: g+1), marks the versions it ends (gen_end: g+1), and then switches the state
// document's generation to g+1 in one single-document update, which MongoDB-wire servers apply
// atomically. A document belongs to generation G when gen ≤ G (documents from before
// generations have no gen: 0) and it has no gen_end ≤ G (current documents have none). Reading
// the state's generation first and then only the documents it shows (visibleAt) gives exactly
// one export; versions ended by the switch are deleted right after it, so a reader whose
// generation moved on while it read reads that inventory again (Query does).

// inChunk bounds the list of one $in: MongoDB serves an _id $in from the primary key, and
// FerretDB scans the collection once per command instead of once per key (measured: 100
// deleteOne take ~6x longer than one deleteMany of 100 on 5k documents).
const inChunk = 1000

// versionID is the _id of the version of r that generation gen writes.
func versionID(r *export.Row, gen int64) string { return rowID(r) + "@" + strconv.FormatInt(gen, 10) }

// notAbove matches a field that is missing or not greater than gen; notAtOrBelow one that is
// missing or greater. $not keeps the documents without the field, which a plain $lte drops.
func notAbove(gen int64) bson.D {
	return bson.D{{Key: "$not", Value: bson.D{{Key: "$gt", Value: gen}}}}
}

func notAtOrBelow(gen int64) bson.D {
	return bson.D{{Key: "$not", Value: bson.D{{Key: "$lte", Value: gen}}}}
}

// visibleAt is the filter of the documents of cluster and inventory that generation gen shows.
func visibleAt(cluster, inventory string, gen int64) bson.D {
	return bson.D{{Key: "cluster", Value: cluster}, {Key: "inventory", Value: inventory},
		{Key: "gen", Value: notAbove(gen)}, {Key: "gen_end", Value: notAtOrBelow(gen)}}
}

// Generation is the committed generation of a (cluster, inventory), as its state document
// holds it: the export a reader may see whole.
type Generation struct {
	Cluster    string `bson:"cluster"`
	Inventory  string `bson:"inventory"`
	Generation int64  `bson:"generation"`
	Checksum   string `bson:"checksum"`
	ItemCount  int64  `bson:"item_count"`
}

// Generations reads the committed generation of every (cluster, inventory) in the state
// collection state, of one cluster and inventory when they are not "". A state without a
// generation (written before generations, or a first export in progress) is generation 0.
func Generations(ctx context.Context, state *mongo.Collection, cluster, inventory string) ([]Generation, error) {
	filter := bson.D{}
	if cluster != "" {
		filter = append(filter, bson.E{Key: "cluster", Value: cluster})
	}
	if inventory != "" {
		filter = append(filter, bson.E{Key: "inventory", Value: inventory})
	}
	cur, err := state.Find(ctx, filter, options.Find().SetProjection(bson.D{{Key: "_id", Value: 0}, {Key: "cluster", Value: 1},
		{Key: "inventory", Value: 1}, {Key: "generation", Value: 1}, {Key: "checksum", Value: 1}, {Key: "item_count", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("reading generations: %w", err)
	}
	var out []Generation
	if err := cur.All(ctx, &out); err != nil {
		return nil, fmt.Errorf("reading generations: %w", err)
	}
	return out, nil
}

// CompleteFilter is the filter of the row documents of the exports gens name, and of no
// other: a reader ANDs it with its own filter. Without generations it matches nothing.
func CompleteFilter(gens []Generation) bson.D {
	if len(gens) == 0 {
		return bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{}}}}}
	}
	or := make(bson.A, len(gens))
	for i, g := range gens {
		or[i] = visibleAt(g.Cluster, g.Inventory, g.Generation)
	}
	return bson.D{{Key: "$or", Value: or}}
}

// scoped is f restricted to this writer's cluster and inventory: no filter of the writer can
// reach another cluster's documents.
func (w *writer) scoped(f ...bson.E) bson.D {
	return append(bson.D{{Key: "cluster", Value: w.cluster}, {Key: "inventory", Value: w.inventory}}, f...)
}

// rollback undoes what an interrupted export wrote after generation gen: its new versions go,
// the versions it ended are current again, and the pending mark goes last. The rows are then
// exactly generation gen's, which a diff computed from its checksum applies to.
func (w *writer) rollback(ctx context.Context, gen int64) error {
	if _, err := w.rows.DeleteMany(ctx, w.scoped(bson.E{Key: "gen", Value: bson.D{{Key: "$gt", Value: gen}}})); err != nil {
		return fmt.Errorf("removing the versions of an interrupted export: %w", err)
	}
	if _, err := w.rows.UpdateMany(ctx, w.scoped(bson.E{Key: "gen_end", Value: bson.D{{Key: "$gt", Value: gen}}}),
		bson.D{{Key: "$unset", Value: bson.D{{Key: "gen_end", Value: ""}}}}); err != nil {
		return fmt.Errorf("restoring the versions an interrupted export ended: %w", err)
	}
	if _, err := w.state.UpdateOne(ctx, bson.D{{Key: "_id", Value: stateID(w.cluster, w.inventory)}},
		bson.D{{Key: "$unset", Value: bson.D{{Key: "pending", Value: ""}}}}); err != nil {
		return fmt.Errorf("clearing the pending mark: %w", err)
	}
	return nil
}

// cleanup deletes the versions generation gen or an earlier one ended, which no reader of gen
// sees, and then the state's mark that some may be left.
func (w *writer) cleanup(ctx context.Context, gen int64) error {
	if _, err := w.rows.DeleteMany(ctx, w.scoped(bson.E{Key: "gen_end", Value: bson.D{{Key: "$lte", Value: gen}}})); err != nil {
		return fmt.Errorf("deleting ended versions: %w", err)
	}
	if _, err := w.state.UpdateOne(ctx, bson.D{{Key: "_id", Value: stateID(w.cluster, w.inventory)}},
		bson.D{{Key: "$unset", Value: bson.D{{Key: "dirty", Value: ""}}}}); err != nil {
		return fmt.Errorf("clearing the cleanup mark: %w", err)
	}
	return nil
}

// endModels mark the versions ids ended by generation gen: one updateMany per chunk of ids,
// which FerretDB serves with one scan (as deleteModels).
func (w *writer) endModels(ids []string, gen int64) []mongo.WriteModel {
	var out []mongo.WriteModel
	for start := 0; start < len(ids); start += inChunk {
		chunk := ids[start:min(start+inChunk, len(ids))]
		in := make(bson.A, len(chunk))
		for i, id := range chunk {
			in[i] = id
		}
		out = append(out, mongo.NewUpdateManyModel().SetFilter(w.scoped(bson.E{Key: "_id", Value: bson.D{{Key: "$in", Value: in}}})).
			SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "gen_end", Value: gen}}}}))
	}
	return out
}

// version is a current (not ended) document of a row.
type version struct {
	ID        string        `bson:"_id"`
	Target    string        `bson:"target"`
	UID       string        `bson:"uid"`
	Digest    string        `bson:"digest"`
	FirstSeen bson.DateTime `bson:"first_seen"`
}

// currentVersions reads the current documents of this cluster and inventory by target/uid,
// of the given uids only unless uids is nil. After a rollback every current document is
// the committed generation's.
func (w *writer) currentVersions(ctx context.Context, uids []string) (map[string][]version, error) {
	out := map[string][]version{}
	read := func(filter bson.D) error {
		cur, err := w.rows.Find(ctx, filter, options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "target", Value: 1},
			{Key: "uid", Value: 1}, {Key: "digest", Value: 1}, {Key: "first_seen", Value: 1}}))
		if err != nil {
			return fmt.Errorf("reading stored rows: %w", err)
		}
		var docs []version
		if err := cur.All(ctx, &docs); err != nil {
			return fmt.Errorf("reading stored rows: %w", err)
		}
		for _, d := range docs {
			k := d.Target + "/" + d.UID
			out[k] = append(out[k], d)
		}
		return nil
	}
	current := bson.E{Key: "gen_end", Value: bson.D{{Key: "$exists", Value: false}}}
	if uids == nil {
		return out, read(w.scoped(current))
	}
	for start := 0; start < len(uids); start += inChunk {
		in := bson.A{}
		for _, u := range uids[start:min(start+inChunk, len(uids))] {
			in = append(in, u)
		}
		if err := read(w.scoped(current, bson.E{Key: "uid", Value: bson.D{{Key: "$in", Value: in}}})); err != nil {
			return nil, err
		}
	}
	return out, nil
}
