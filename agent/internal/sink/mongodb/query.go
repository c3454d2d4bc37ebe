package mongodb

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

// filterDoc builds the query document of f. Attribute values that are maps are flattened
// into dotted paths, which gives the containment RowFilter promises (as JSONB does in Postgres).
func filterDoc(f sink.RowFilter) bson.D {
	d := bson.D{}
	for _, c := range []struct{ field, v string }{
		{"cluster", f.Cluster}, {"inventory", f.Inventory}, {"kind", f.Kind}, {"namespace", f.Namespace}, {"name", f.Name},
	} {
		if c.v != "" {
			d = append(d, bson.E{Key: c.field, Value: c.v})
		}
	}
	var flatten func(prefix string, m map[string]any)
	flatten = func(prefix string, m map[string]any) {
		for k, v := range m {
			if sub, ok := v.(map[string]any); ok && len(sub) > 0 {
				flatten(prefix+"."+k, sub)
				continue
			}
			d = append(d, bson.E{Key: prefix + "." + k, Value: v})
		}
	}
	flatten("attributes", f.Attributes)
	return d
}

// queryRounds bounds how often Query reads again because an export switched generation
// while it read.
const queryRounds = 5

// Query reads the rows of coll matching f that complete exports hold, ordered by cluster,
// kind, namespace and name: the documents of the generation each (cluster, inventory)
// committed, as the state collection <coll>_state says (generation.go). It reads the
// generations, then the rows, then the generations again, and reads again if one moved
// meanwhile: the versions a switch ends are deleted right after it. It is what
// `kollect query` runs against a MongoDB sink.
func Query(ctx context.Context, coll *mongo.Collection, f sink.RowFilter) ([]sink.StoredRow, error) {
	state := coll.Database().Collection(coll.Name() + "_state")
	gens, err := Generations(ctx, state, f.Cluster, f.Inventory)
	if err != nil {
		return nil, fmt.Errorf("querying %s: %w", coll.Name(), err)
	}
	for range queryRounds {
		rows, err := queryAt(ctx, coll, f, gens)
		if err != nil {
			return nil, err
		}
		after, err := Generations(ctx, state, f.Cluster, f.Inventory)
		if err != nil {
			return nil, fmt.Errorf("querying %s: %w", coll.Name(), err)
		}
		if sameGenerations(gens, after) {
			return rows, nil
		}
		gens = after
	}
	return nil, fmt.Errorf("querying %s: exports switched generation during each of %d reads; try again", coll.Name(), queryRounds)
}

// sameGenerations reports whether a and b name the same generation of the same inventories.
func sameGenerations(a, b []Generation) bool {
	if len(a) != len(b) {
		return false
	}
	seen := make(map[string]int64, len(a))
	for _, g := range a {
		seen[g.Cluster+"/"+g.Inventory] = g.Generation
	}
	for _, g := range b {
		if gen, ok := seen[g.Cluster+"/"+g.Inventory]; !ok || gen != g.Generation {
			return false
		}
	}
	return true
}

// queryAt reads the rows of coll matching f that the generations gens show.
func queryAt(ctx context.Context, coll *mongo.Collection, f sink.RowFilter, gens []Generation) ([]sink.StoredRow, error) {
	if len(gens) == 0 {
		return nil, nil
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 1000
	}
	opts := options.Find().SetLimit(int64(limit)).SetSort(bson.D{
		{Key: "cluster", Value: 1}, {Key: "kind", Value: 1}, {Key: "namespace", Value: 1}, {Key: "name", Value: 1},
		{Key: "inventory", Value: 1}, {Key: "target", Value: 1}, {Key: "uid", Value: 1}})
	cur, err := coll.Find(ctx, append(filterDoc(f), CompleteFilter(gens)...), opts)
	if err != nil {
		return nil, fmt.Errorf("querying %s: %w", coll.Name(), err)
	}
	defer cur.Close(ctx)
	var out []sink.StoredRow
	for cur.Next(ctx) {
		var d struct {
			Cluster    string        `bson:"cluster"`
			Inventory  string        `bson:"inventory"`
			Target     string        `bson:"target"`
			Group      string        `bson:"api_group"`
			Version    string        `bson:"version"`
			Kind       string        `bson:"kind"`
			Namespace  string        `bson:"namespace"`
			Name       string        `bson:"name"`
			UID        string        `bson:"uid"`
			Profile    string        `bson:"profile"`
			ProfileGen int64         `bson:"profile_generation"`
			Attributes bson.D        `bson:"attributes"`
			FirstSeen  bson.DateTime `bson:"first_seen"`
			UpdatedAt  bson.DateTime `bson:"updated_at"`
		}
		if err := cur.Decode(&d); err != nil {
			return nil, fmt.Errorf("decoding a row of %s: %w", coll.Name(), err)
		}
		attrs, err := fromBSON(d.Attributes)
		if err != nil {
			return nil, fmt.Errorf("attributes of %s/%s/%s/%s: %w", d.Cluster, d.Inventory, d.Target, d.UID, err)
		}
		out = append(out, sink.StoredRow{Row: export.Row{Origin: &export.Origin{Cluster: d.Cluster, Inventory: d.Inventory, Target: d.Target, Group: d.Group, Version: d.Version, Kind: d.Kind, Profile: d.Profile, ProfileGeneration: d.ProfileGen}, Namespace: d.Namespace, Name: d.Name, UID: d.UID, Attributes: attrs}, FirstSeen: d.FirstSeen.Time().UTC(), UpdatedAt: d.UpdatedAt.Time().UTC()})
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("querying %s: %w", coll.Name(), err)
	}
	return out, nil
}

// Query reads rows of this sink's collection; see the package-level Query.
func (s *Sink) Query(ctx context.Context, f sink.RowFilter) ([]sink.StoredRow, error) {
	if !f.AsOf.IsZero() {
		return nil, fmt.Errorf("a mongodb sink keeps no history: rows as of a time are read from a postgres sink with history: true")
	}
	return Query(ctx, s.rows, f)
}
