package mongodb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
)

// exportAt exports n Deployments of cluster's inventory, with their coverage entry, as an
// agent did at the time at.
func exportAt(t *testing.T, s *Sink, cluster, inventory string, n int, at time.Time) {
	t.Helper()
	a := &agent{sink: s, cluster: cluster, inventory: inventory,
		writer:   export.Writer{Version: "v0.1.0", Instance: "kollect-system@" + cluster},
		coverage: []export.Coverage{sinktest.Complete("deployments", int64(n))}}
	b := a.batch(sinktest.Deployments(cluster, inventory, n, 1))
	b.Envelope.ExportedAt = at
	if err := s.Export(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

// documents is every document of a cluster in the three collections, in full and in _id
// order: any rewrite or removal changes it.
func documents(t *testing.T, db, cluster string) string {
	t.Helper()
	out := ""
	for _, name := range []string{"rows", "rows_coverage", "rows_state"} {
		cur, err := collection(t, db, name).Find(context.Background(), bson.D{{Key: "cluster", Value: cluster}},
			options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
		if err != nil {
			t.Fatal(err)
		}
		var docs []bson.M
		if err := cur.All(context.Background(), &docs); err != nil {
			t.Fatal(err)
		}
		// encoding/json sorts map keys: the server's field order is not the point.
		js, err := json.Marshal(docs)
		if err != nil {
			t.Fatal(err)
		}
		out += fmt.Sprintf("%s: %s\n", name, js)
	}
	return out
}

// counts is a cluster's rows, coverage documents and state documents.
func counts(t *testing.T, db, cluster string) [3]int64 {
	t.Helper()
	var out [3]int64
	for i, name := range []string{"rows", "rows_coverage", "rows_state"} {
		out[i] = countDocs(t, collection(t, db, name), bson.D{{Key: "cluster", Value: cluster}})
	}
	return out
}

// TestPurgeRemovesOneClusterOnly: Holdings reports per inventory what the collections hold;
// a cutoff before the agent's last write refuses and removes nothing; a purge of one
// inventory, then of the rest, removes exactly that cluster's rows, coverage and state and
// reports it, while the other cluster's documents stay exactly as they were.
func TestPurgeRemovesOneClusterOnly(t *testing.T) {
	db := newDatabase(t)
	east, _ := newSink(t, db, "east")
	west, _ := newSink(t, db, "west")
	sinks := map[string]*Sink{"east": east, "west": west}
	sinktest.PurgeContract(t, sinktest.PurgeCase{East: east, West: west, Precision: time.Millisecond, // BSON dates hold milliseconds
		Export: func(cluster, inventory string, n int, at time.Time) {
			exportAt(t, sinks[cluster], cluster, inventory, n, at)
		},
		Held:        func(cluster string) [3]int64 { return counts(t, db, cluster) },
		Fingerprint: func(cluster string) string { return documents(t, db, cluster) },
	})
}

// TestPurgeKeepsAStateConfirmedSinceHoldings: the cutoff is in the state's delete filter, so
// an agent that confirmed after Holdings read its state keeps the state and its rows.
func TestPurgeKeepsAStateConfirmedSinceHoldings(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	s, rec := newSink(t, db, "east")
	exportAt(t, s, "east", "apps", 5, time.Now().Add(-3*time.Hour))
	// The agent confirms just as the purge starts deleting (after its Holdings).
	confirmed := false
	rec.setHook(func(cmd string) {
		if cmd == "delete rows_state" && !confirmed {
			confirmed = true
			_, err := collection(t, db, "rows_state").UpdateOne(context.Background(), bson.D{{Key: "cluster", Value: "east"}},
				bson.D{{Key: "$set", Value: bson.D{{Key: "confirmed_at", Value: bson.NewDateTimeFromTime(time.Now())}}}})
			if err != nil {
				t.Error(err)
			}
		}
	})
	_, err := s.Purge(ctx, "east", "", time.Now().Add(-time.Hour))
	rec.setHook(nil)
	if !confirmed {
		t.Fatal("the purge deleted no state")
	}
	if !errors.Is(err, sink.ErrNotRetired) {
		t.Fatalf("purge of a state confirmed meanwhile: %v, want ErrNotRetired", err)
	}
	if got := counts(t, db, "east"); got != [3]int64{5, 1, 1} {
		t.Fatalf("east holds %v after a refused purge", got)
	}
}
