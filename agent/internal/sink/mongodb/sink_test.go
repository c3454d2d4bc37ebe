package mongodb

import (
	"context"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
)

func TestTwoClustersShareOneDatabase(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	sa, _ := newSink(t, db, "east")
	sb, _ := newSink(t, db, "west")
	a := &agent{sink: sa, cluster: "east", inventory: "apps"}
	b := &agent{sink: sb, cluster: "west", inventory: "apps"}
	rowsA := sinktest.Deployments("east", "apps", 5, 1)
	if err := a.export(ctx, rowsA); err != nil {
		t.Fatal(err)
	}
	if err := b.export(ctx, sinktest.Deployments("west", "apps", 4, 1)); err != nil {
		t.Fatal(err)
	}
	coll := collection(t, db, "rows")
	if got := len(stored(t, coll, "east")); got != 5 {
		t.Fatalf("east holds %d rows", got)
	}
	if got := len(stored(t, coll, "west")); got != 4 {
		t.Fatalf("west holds %d rows", got)
	}
	gone := rowsA[2].UID
	if err := a.export(ctx, append(append([]export.Row(nil), rowsA[:2]...), rowsA[3:]...)); err != nil {
		t.Fatal(err)
	}
	if east := stored(t, coll, "east"); len(east) != 4 || east[gone] != "" {
		t.Fatalf("after deleting %s east holds %v", gone, east)
	}
	restarted := &agent{sink: sa, cluster: "east", inventory: "apps"}
	if err := restarted.export(ctx, sinktest.Deployments("east", "apps", 2, 2)); err != nil {
		t.Fatal(err)
	}
	if got := len(stored(t, coll, "east")); got != 2 {
		t.Fatalf("east holds %d rows after reconcile", got)
	}
	if err := restarted.export(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := len(stored(t, coll, "east")); got != 0 {
		t.Fatalf("east holds %d rows after an empty export", got)
	}
	if got := len(stored(t, coll, "west")); got != 4 {
		t.Fatalf("east's exports changed west: %d rows", got)
	}
	// The unique identity index exists and includes the cluster.
	specs, err := coll.Indexes().ListSpecifications(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, s := range specs {
		if s.Name == "kollect_identity_gen" && s.Unique != nil && *s.Unique && strings.Contains(string(s.KeysDocument), "cluster") {
			found = true
		}
	}
	if !found {
		t.Fatalf("no unique identity index: %+v", specs)
	}
}

func TestForeignRowsAreRefused(t *testing.T) {
	ctx := context.Background()
	s, _ := newSink(t, newDatabase(t), "east")
	a := &agent{sink: s, cluster: "east", inventory: "apps"}
	bad := a.batch(sinktest.Deployments("east", "apps", 2, 1))
	bad.Envelope.Rows[0] = bad.Envelope.Rows[0].With(func(o *export.Origin) { o.Cluster = "west" })
	if err := s.Export(ctx, bad); sink.ClassOf(err) != sink.Terminal || err == nil {
		t.Fatalf("a stray row of another cluster: %v", err)
	}
	if err := s.Export(ctx, (&agent{sink: s, cluster: "west", inventory: "apps"}).batch(nil)); err == nil {
		t.Fatal("east's sink accepted west's envelope")
	}
}

func TestUnchangedDataWritesNothing(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	s, rec := newSink(t, db, "east")
	a := &agent{sink: s, cluster: "east", inventory: "apps"}
	rows := sinktest.Deployments("east", "apps", 40, 1)
	if err := a.export(ctx, rows); err != nil {
		t.Fatal(err)
	}
	if len(writes(rec.take())) == 0 {
		t.Fatal("the first export wrote nothing")
	}
	if err := a.export(ctx, rows); err != nil {
		t.Fatal(err)
	}
	if w := writes(rec.take()); len(w) != 0 {
		t.Fatalf("an unchanged export wrote: %q", w)
	}
	// Restart: new sink, Full diff, previous checksum from status — and without status.
	s2, rec2 := newSink(t, db, "east")
	for _, last := range []string{a.lastChecksum, ""} {
		r := &agent{sink: s2, cluster: "east", inventory: "apps", lastChecksum: last}
		if err := r.export(ctx, rows); err != nil {
			t.Fatal(err)
		}
		if w := writes(rec2.take()); len(w) != 0 {
			t.Fatalf("an unchanged export after a restart wrote: %q", w)
		}
	}
	// A resync re-reads everything and rewrites no row.
	coll := collection(t, db, "rows")
	before := stored(t, coll, "east")
	b := a.batch(rows)
	b.Resync = true
	if err := s2.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	if w := writes(rec2.take()); len(w) != 0 {
		t.Fatalf("a resync of equal data wrote: %q", w)
	}
	if !maps.Equal(before, stored(t, coll, "east")) {
		t.Fatal("the resync changed rows")
	}
}

func TestMismatchedStateTriggersFullReconcile(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	s, _ := newSink(t, db, "east")
	w, _ := newSink(t, db, "west")
	a := &agent{sink: s, cluster: "east", inventory: "apps"}
	if err := a.export(ctx, sinktest.Deployments("east", "apps", 6, 1)); err != nil {
		t.Fatal(err)
	}
	if err := (&agent{sink: w, cluster: "west", inventory: "apps"}).export(ctx, sinktest.Deployments("west", "apps", 3, 1)); err != nil {
		t.Fatal(err)
	}
	coll, state := collection(t, db, "rows"), collection(t, db, "rows_state")
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "east/apps/deployments/stray"}, {Key: "cluster", Value: "east"},
		{Key: "inventory", Value: "apps"}, {Key: "target", Value: "deployments"}, {Key: "uid", Value: "stray"},
		{Key: "attributes", Value: bson.D{}}}); err != nil {
		t.Fatal(err)
	}
	if res, err := coll.DeleteOne(ctx, bson.D{{Key: "cluster", Value: "east"}, {Key: "uid", Value: "east-uid-00001"}}); err != nil || res.DeletedCount != 1 {
		t.Fatalf("deleting a row behind the sink's back: %v, %v", res, err)
	}
	if _, err := state.UpdateOne(ctx, bson.D{{Key: "_id", Value: "east/apps"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "checksum", Value: "sha256:drifted"}}}}); err != nil {
		t.Fatal(err)
	}
	next := sinktest.Deployments("east", "apps", 6, 1)
	next[0] = sinktest.Deployment("east", "apps", 0, map[string]any{"replicas": 7})
	if err := a.export(ctx, next); err != nil {
		t.Fatal(err)
	}
	east := stored(t, coll, "east")
	if len(east) != 6 || east["stray"] != "" || east["east-uid-00001"] == "" || east["east-uid-00000"] != `{"replicas":7}` {
		t.Fatalf("east after reconcile: %v", east)
	}
	if got := len(stored(t, coll, "west")); got != 3 {
		t.Fatalf("east's reconcile touched west: %d rows", got)
	}
}

func TestInterruptedExportConverges(t *testing.T) {
	for _, tc := range []struct {
		name string
		// at is the command during which the export dies.
		at string
	}{
		{"context cancelled during the bulk write", "update rows"},
		{"crash after the rows, before the state", "update rows_state"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			db := newDatabase(t)
			s, rec := newSink(t, db, "east")
			coll := collection(t, db, "rows")
			a := &agent{sink: s, cluster: "east", inventory: "apps"}
			base := sinktest.Deployments("east", "apps", 300, 1)
			if err := a.export(ctx, base); err != nil {
				t.Fatal(err)
			}
			// X changes row 0 and adds a row; it dies at tc.at.
			x := append(append([]export.Row(nil), base...), sinktest.Deployment("east", "apps", 999, map[string]any{"new": true}))
			x[0] = sinktest.Deployment("east", "apps", 0, map[string]any{"replicas": 42})
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			updates := 0
			rec.setHook(func(cmd string) {
				if cmd == tc.at {
					if updates++; tc.at != "update rows_state" || updates == 2 { // the second state update is the commit
						cancel()
					}
				}
			})
			err := a.sink.Export(cctx, a.batch(x))
			rec.setHook(nil)
			if err == nil {
				t.Fatal("the interrupted export succeeded")
			}
			if sink.ClassOf(err) != sink.Transient {
				t.Fatalf("an interrupted export is %s: %v", sink.ClassOf(err), err)
			}
			// Meanwhile the data moved on: Y is the base with row 1 changed. The delivery worker's diff
			// is base → Y and knows nothing of X's writes.
			y := append([]export.Row(nil), base...)
			y[1] = sinktest.Deployment("east", "apps", 1, map[string]any{"replicas": 43})
			if err := a.export(ctx, y); err != nil {
				t.Fatal(err)
			}
			want := map[string]string{}
			for _, r := range export.NewSnapshot(y).Rows {
				want[r.UID] = string(r.Attributes)
			}
			if got := stored(t, coll, "east"); !maps.Equal(got, want) {
				t.Fatalf("did not converge on Y: %d rows, row0 %s, extra %q", len(got), got["east-uid-00000"], got["east-uid-00999"])
			}
		})
	}
}

func TestLargeUnicodeNestedAttributesRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, _ := newSink(t, newDatabase(t), "east")
	attrs := map[string]any{
		"name":   "名前 — ☸ é",
		"big":    strings.Repeat("ü✓ab", 1<<20/7),
		"nested": map[string]any{"a": []any{1, "two", map[string]any{"three": true, "nil": nil}}, "z": 1.5, "big": int64(1) << 53},
		"quote":  `"'\` + "\n\t",
	}
	row := sinktest.Deployment("east", "apps", 1, attrs)
	row.Name = "ünïcödé-名前"
	a := &agent{sink: s, cluster: "east", inventory: "apps"}
	if err := a.export(ctx, []export.Row{row}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Query(ctx, sink.RowFilter{Cluster: "east"})
	if err != nil || len(got) != 1 {
		t.Fatalf("query: %v, %d rows", err, len(got))
	}
	if string(got[0].CanonicalJSON()) != string(row.CanonicalJSON()) {
		t.Fatalf("row did not round-trip:\n got %.300s\nwant %.300s", got[0].CanonicalJSON(), row.CanonicalJSON())
	}
}

func TestDiffWithAnExistingAddedKeyReconciles(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	s, _ := newSink(t, db, "east")
	a := &agent{sink: s, cluster: "east", inventory: "apps"}
	rows := sinktest.Deployments("east", "apps", 4, 1)
	if err := a.export(ctx, rows[:3]); err != nil {
		t.Fatal(err)
	}
	// Someone wrote row 3 behind the agent's back: the diff's "added" key exists.
	other, _ := newSink(t, db, "east")
	if err := (&agent{sink: other, cluster: "east", inventory: "apps"}).export(ctx, rows); err != nil {
		t.Fatal(err)
	}
	coll := collection(t, db, "rows_state")
	if _, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "east/apps"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "checksum", Value: a.lastChecksum}}}}); err != nil {
		t.Fatal(err)
	}
	next := append([]export.Row(nil), rows...)
	next[0] = sinktest.Deployment("east", "apps", 0, map[string]any{"replicas": 5})
	if err := a.export(ctx, next); err != nil {
		t.Fatal(err)
	}
	got := stored(t, collection(t, db, "rows"), "east")
	if len(got) != 4 || got["east-uid-00000"] != `{"replicas":5}` {
		t.Fatalf("after the fallback: %v", got)
	}
}

// TestManyChangedRowsInOneExport changes 120 rows at once. FerretDB v1 stops answering an
// update command of 100 or more matching updates (see updateChunk), so this export only
// completes because the sink sends at most updateChunk updates per command, which the
// command monitor checks too.
func TestManyChangedRowsInOneExport(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	var mu sync.Mutex
	largest := 0
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName != "update" {
			return
		}
		// OP_MSG carries the updates as a document sequence, which the event folds back into
		// the command document.
		n := 0
		if arr, ok := e.Command.Lookup("updates").ArrayOK(); ok {
			vals, _ := arr.Values()
			n = len(vals)
		}
		mu.Lock()
		largest = max(largest, n)
		mu.Unlock()
	}}
	s, err := open(ctx, spec(db), testEnv("east"), withMonitor(mon))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a := &agent{sink: s, cluster: "east", inventory: "apps"}
	if err := a.export(ctx, sinktest.Deployments("east", "apps", 150, 1)); err != nil {
		t.Fatal(err)
	}
	next := sinktest.Deployments("east", "apps", 150, 1)
	for i := range 120 {
		next[i] = sinktest.Deployment("east", "apps", i, map[string]any{"image": "registry.example/app:2"})
	}
	// Without chunking this export would wait for FerretDB forever: fail instead.
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := a.export(cctx, next); err != nil {
		t.Fatal(err)
	}
	got := stored(t, collection(t, db, "rows"), "east")
	changed := 0
	for _, attrs := range got {
		if strings.Contains(attrs, "app:2") {
			changed++
		}
	}
	if len(got) != 150 || changed != 120 {
		t.Fatalf("%d rows, %d changed", len(got), changed)
	}
	mu.Lock()
	defer mu.Unlock()
	if largest == 0 || largest > updateChunk {
		t.Fatalf("largest update command held %d updates (limit %d)", largest, updateChunk)
	}
}
