package mongodb

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

var _ sink.Purger = (*Sink)(nil)

// OpenURI opens a handle onto the sink collections <collection>, _state and _coverage of
// database at uri, for an operator's command (kollect query, kollect sinks purge): the
// operator's own URI (credentials may be in it) and network, so neither Secrets nor the
// agent's egress guard apply, and no index is created. It pings the server so that an
// unreachable one is the command's first error.
func OpenURI(ctx context.Context, uri, database, collection string) (*Sink, error) {
	client, err := mongo.Connect(options.Client().ApplyURI(uri).SetAppName("kollect"))
	if err != nil {
		return nil, fmt.Errorf("connecting to MongoDB: %w", err)
	}
	if err := client.Ping(ctx, nil); err != nil {
		_ = client.Disconnect(context.Background())
		return nil, fmt.Errorf("connecting to MongoDB: %w", err)
	}
	host := "?"
	if u, err := url.Parse(uri); err == nil {
		host = u.Scheme + "://" + u.Host
	}
	db := client.Database(database)
	return &Sink{dest: fmt.Sprintf("%s %s.%s", host, database, collection), client: client,
		rows: db.Collection(collection), state: db.Collection(collection + "_state"),
		coverage: db.Collection(collection + "_coverage")}, nil
}

// scope is the filter of a cluster's documents, of one inventory unless inventory is "".
func scope(cluster, inventory string) bson.D {
	f := bson.D{{Key: "cluster", Value: cluster}}
	if inventory != "" {
		f = append(f, bson.E{Key: "inventory", Value: inventory})
	}
	return f
}

// countByInventory counts the documents of coll matching filter per inventory. $group with
// $sum is what FerretDB v1 supports of the aggregation accumulators.
func countByInventory(ctx context.Context, coll *mongo.Collection, filter bson.D) (map[string]int, error) {
	cur, err := coll.Aggregate(ctx, bson.A{
		bson.D{{Key: "$match", Value: filter}},
		bson.D{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$inventory"}, {Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}}}}},
	})
	if err != nil {
		return nil, fmt.Errorf("counting %s: %w", coll.Name(), err)
	}
	var groups []struct {
		Inventory string `bson:"_id"`
		N         int    `bson:"n"`
	}
	if err := cur.All(ctx, &groups); err != nil {
		return nil, fmt.Errorf("counting %s: %w", coll.Name(), err)
	}
	out := make(map[string]int, len(groups))
	for _, g := range groups {
		out[g.Inventory] = g.N
	}
	return out, nil
}

// heldState is the part of a state document Holdings reports (see stateDoc).
type heldState struct {
	Inventory     string        `bson:"inventory"`
	ExportedAt    bson.DateTime `bson:"exported_at"`
	ConfirmedAt   bson.DateTime `bson:"confirmed_at"`
	AgentVersion  string        `bson:"agent_version"`
	AgentInstance string        `bson:"agent_instance"`
}

// Holdings reports what the collections hold of the cluster: two counting aggregations and
// one find of its state documents, no write.
func (s *Sink) Holdings(ctx context.Context, cluster, inventory string) ([]sink.Holding, error) {
	if cluster == "" {
		return nil, sink.Terminalf("mongodb sink %s: holdings of no cluster", s.dest)
	}
	set := sink.HoldingSet{}
	f := scope(cluster, inventory)
	rows, err := countByInventory(ctx, s.rows, f)
	if err != nil {
		return nil, classify(fmt.Errorf("mongodb sink %s: %w", s.dest, err))
	}
	for inv, n := range rows {
		set.Of(inv).Rows = n
	}
	cov, err := countByInventory(ctx, s.coverage, f)
	if err != nil {
		return nil, classify(fmt.Errorf("mongodb sink %s: %w", s.dest, err))
	}
	for inv, n := range cov {
		set.Of(inv).CoverageEntries = n
	}
	cur, err := s.state.Find(ctx, f)
	if err != nil {
		return nil, classify(fmt.Errorf("mongodb sink %s: reading %s: %w", s.dest, s.state.Name(), err))
	}
	var states []heldState
	if err := cur.All(ctx, &states); err != nil {
		return nil, classify(fmt.Errorf("mongodb sink %s: reading %s: %w", s.dest, s.state.Name(), err))
	}
	for _, st := range states {
		h := set.Of(st.Inventory)
		h.StateRecords++
		if st.ExportedAt != 0 {
			h.ChangedAt = st.ExportedAt.Time().UTC()
		}
		if st.ConfirmedAt != 0 {
			h.ConfirmedAt = st.ConfirmedAt.Time().UTC()
		}
		h.Writer = export.Writer{Version: st.AgentVersion, Instance: st.AgentInstance}
	}
	return set.List(), nil
}

// Purge removes, inventory by inventory, the state document first, then the rows, then the
// coverage documents. There is no transaction (FerretDB v1 and standalone servers have none),
// so the order is what keeps an interrupted purge honest: it leaves rows without a state,
// which no reader takes for confirmed and which a second purge finds and removes, never a
// state vouching for rows half gone. The cutoff is part of the state's delete filter: an
// agent that confirmed since Holdings keeps its state, and then its rows. An export running
// meanwhile (there is no lock to wait for) may write rows back; a live agent that finds its
// state gone exports in full at its next confirmation anyway.
func (s *Sink) Purge(ctx context.Context, cluster, inventory string, cutoff time.Time) ([]sink.Holding, error) {
	if err := s.ownCluster(cluster); err != nil {
		return nil, err
	}
	held, err := s.Holdings(ctx, cluster, inventory)
	if err != nil {
		return nil, err
	}
	if late := sink.NotRetired(held, cutoff); len(late) > 0 {
		return nil, fmt.Errorf("mongodb sink %s: %w", s.dest, sink.NotRetiredError(cluster, late, cutoff))
	}
	var removed []sink.Holding
	for _, h := range held {
		got := sink.Holding{Inventory: h.Inventory, ChangedAt: h.ChangedAt, ConfirmedAt: h.ConfirmedAt, Writer: h.Writer}
		f := scope(cluster, h.Inventory)
		stateFilter := f
		if !cutoff.IsZero() {
			stateFilter = append(bson.D{}, f...)
			stateFilter = append(stateFilter, bson.E{Key: "$and", Value: bson.A{
				bson.D{{Key: "$or", Value: bson.A{bson.D{{Key: "confirmed_at", Value: bson.D{{Key: "$exists", Value: false}}}},
					bson.D{{Key: "confirmed_at", Value: bson.D{{Key: "$lt", Value: bson.NewDateTimeFromTime(cutoff)}}}}}}},
				bson.D{{Key: "$or", Value: bson.A{bson.D{{Key: "exported_at", Value: bson.D{{Key: "$exists", Value: false}}}},
					bson.D{{Key: "exported_at", Value: bson.D{{Key: "$lt", Value: bson.NewDateTimeFromTime(cutoff)}}}}}}},
			}})
		}
		res, err := s.state.DeleteMany(ctx, stateFilter)
		if err != nil {
			return removed, classify(fmt.Errorf("mongodb sink %s: purging the state of %s/%s: %w", s.dest, cluster, h.Inventory, err))
		}
		if int(res.DeletedCount) < h.StateRecords {
			// Written after Holdings read it, at or after the cutoff: the agent is back.
			return removed, fmt.Errorf("mongodb sink %s: cluster %s: %w %s: the state of inventory %s was written while purging",
				s.dest, cluster, sink.ErrNotRetired, cutoff.UTC().Format(time.RFC3339), h.Inventory)
		}
		got.StateRecords = int(res.DeletedCount)
		if res, err = s.rows.DeleteMany(ctx, f); err != nil {
			return removed, classify(fmt.Errorf("mongodb sink %s: purging the rows of %s/%s: %w", s.dest, cluster, h.Inventory, err))
		}
		got.Rows = int(res.DeletedCount)
		if res, err = s.coverage.DeleteMany(ctx, f); err != nil {
			return removed, classify(fmt.Errorf("mongodb sink %s: purging the coverage of %s/%s: %w", s.dest, cluster, h.Inventory, err))
		}
		got.CoverageEntries = int(res.DeletedCount)
		removed = append(removed, got)
	}
	return removed, nil
}

// ownCluster refuses a purge of no cluster, and one of another cluster than the agent's own
// by a sink the agent built: an agent only ever deletes its own cluster's data. Operator
// handles (OpenURI) name no cluster and may purge any.
func (s *Sink) ownCluster(cluster string) error {
	switch {
	case cluster == "":
		return sink.Terminalf("mongodb sink %s: purge of no cluster", s.dest)
	case s.env.Cluster != "" && cluster != s.env.Cluster:
		return sink.Terminalf("mongodb sink %s: the sink of cluster %s may not purge cluster %s", s.dest, s.env.Cluster, cluster)
	}
	return nil
}
