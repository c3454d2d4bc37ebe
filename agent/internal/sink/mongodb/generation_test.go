package mongodb

import (
	"context"
	"maps"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink/sinktest"
)

// want is rows as stored() returns them: uid → canonical attributes.
func want(rows []export.Row) map[string]string {
	out := map[string]string{}
	for _, r := range rows {
		out[r.UID] = string(r.Attributes)
	}
	return out
}

// TestStateLostKeepsVersionsApart: an operator deletes the state document while versions of
// several generations' rows remain; the next export, a full reconcile from generation 0,
// must not reuse their _ids, and holds exactly its snapshot.
func TestStateLostKeepsVersionsApart(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	s, _ := newSink(t, db, "east")
	a := &agent{sink: s, cluster: "east", inventory: "apps"}
	v1 := sinktest.Deployments("east", "apps", 5, 1)
	v2 := sinktest.Deployments("east", "apps", 5, 2)
	for _, v := range [][]export.Row{v1, v2} {
		if err := a.export(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	state := collection(t, db, "rows_state")
	if _, err := state.DeleteOne(ctx, bson.D{{Key: "_id", Value: "east/apps"}}); err != nil {
		t.Fatal(err)
	}
	v3 := sinktest.Deployments("east", "apps", 6, 3)
	if err := a.export(ctx, v3); err != nil {
		t.Fatalf("export after the state was lost: %v", err)
	}
	rows := collection(t, db, "rows")
	if got := stored(t, rows, "east"); !maps.Equal(got, want(v3)) {
		t.Fatalf("after the state was lost: %v", got)
	}
	if n := countDocs(t, rows, bson.D{}); n != 6 {
		t.Fatalf("%d documents, want 6", n)
	}
	var st stateDoc
	if err := state.FindOne(ctx, bson.D{{Key: "_id", Value: "east/apps"}}).Decode(&st); err != nil || st.Generation != 3 {
		t.Fatalf("state %+v (%v), want generation 3, above the versions left", st, err)
	}
}

// legacyRows writes rows, a state and the identity index as an agent of the version before
// generations left them: _id the identity key, no gen, the unique index kollect_identity.
func legacyRows(t *testing.T, db string, rows []export.Row, pending string) {
	t.Helper()
	ctx := context.Background()
	coll, state := collection(t, db, "rows"), collection(t, db, "rows_state")
	if _, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "cluster", Value: 1}, {Key: "inventory", Value: 1},
		{Key: "target", Value: 1}, {Key: "uid", Value: 1}}, Options: options.Index().SetName("kollect_identity").SetUnique(true)}); err != nil {
		t.Fatal(err)
	}
	now := bson.NewDateTimeFromTime(time.Now())
	for i := range rows {
		fields, err := rowFields(&rows[i])
		if err != nil {
			t.Fatal(err)
		}
		doc := append(bson.D{{Key: "_id", Value: rowID(&rows[i])}}, fields...)
		doc = append(doc, bson.E{Key: "first_seen", Value: now}, bson.E{Key: "updated_at", Value: now})
		if _, err := coll.InsertOne(ctx, doc); err != nil {
			t.Fatal(err)
		}
	}
	set := bson.D{{Key: "cluster", Value: "east"}, {Key: "inventory", Value: "apps"},
		{Key: "checksum", Value: export.NewSnapshot(append([]export.Row(nil), rows...)).Checksum}, {Key: "item_count", Value: int64(len(rows))}}
	if pending != "" {
		set = append(set, bson.E{Key: "pending", Value: pending})
	}
	if _, err := state.UpdateOne(ctx, bson.D{{Key: "_id", Value: "east/apps"}}, bson.D{{Key: "$set", Value: set}},
		options.UpdateOne().SetUpsert(true)); err != nil {
		t.Fatal(err)
	}
}

// TestRowsFromBeforeGenerations: rows, state and index of the version before generations are
// read as generation 0, and the first export with generations drops the old unique index,
// applies its diff over them and leaves one version per row. A pending mark of that version
// (an export interrupted mid-way, its rows written in place) makes the export reconcile fully.
func TestRowsFromBeforeGenerations(t *testing.T) {
	for _, pending := range []string{"", "sha256:interrupted"} {
		t.Run("pending="+pending, func(t *testing.T) {
			ctx := context.Background()
			db := newDatabase(t)
			v1 := sinktest.Deployments("east", "apps", 6, 1)
			legacyRows(t, db, v1, pending)
			rows := collection(t, db, "rows")
			if pending != "" {
				// The interrupted export had rewritten row 2 in place.
				if _, err := rows.UpdateOne(ctx, bson.D{{Key: "_id", Value: rowID(&v1[2])}},
					bson.D{{Key: "$set", Value: bson.D{{Key: "attributes", Value: bson.D{{Key: "half", Value: true}}},
						{Key: "digest", Value: "digest-of-the-interrupted-export"}}}}); err != nil {
					t.Fatal(err)
				}
			}
			s, _ := newSink(t, db, "east")
			if got := stored(t, rows, "east"); len(got) != 6 {
				t.Fatalf("rows from before generations read as %d rows, want 6", len(got))
			}
			a := &agent{sink: s, cluster: "east", inventory: "apps", prev: export.NewSnapshot(append([]export.Row(nil), v1...))}
			a.lastChecksum = a.prev.Checksum
			v2 := append([]export.Row(nil), v1[1:]...)
			v2[0] = sinktest.Deployment("east", "apps", 1, map[string]any{"replicas": 9})
			if err := a.export(ctx, v2); err != nil {
				t.Fatal(err)
			}
			if got := stored(t, rows, "east"); !maps.Equal(got, want(v2)) {
				t.Fatalf("after the first export with generations: %v", got)
			}
			if n := countDocs(t, rows, bson.D{}); n != int64(len(v2)) {
				t.Fatalf("%d documents, want one per row (%d)", n, len(v2))
			}
			specs, err := rows.Indexes().ListSpecifications(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, sp := range specs {
				if sp.Name == "kollect_identity" {
					t.Fatal("the index of the earlier version is still there")
				}
			}
		})
	}
}
