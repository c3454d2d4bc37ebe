package mongodb

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
)

// TestConfirmSetsOnlyConfirmedAt, against FerretDB (a stand-in for MongoDB): a confirmation is
// one update of the state document's confirmed_at, no row changes, exported_at stays; another
// checksum is ErrNotHeld.
func TestConfirmSetsOnlyConfirmedAt(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	s, rec := newSink(t, db, "east")
	a := &agent{sink: s, cluster: "east", inventory: "apps"}
	if err := a.export(ctx, sinktest.Deployments("east", "apps", 10, 1)); err != nil {
		t.Fatal(err)
	}
	rec.take()
	rows, state := collection(t, db, "rows"), collection(t, db, "rows_state")
	before := stored(t, rows, "east")
	read := func() stateDoc {
		t.Helper()
		var st stateDoc
		if err := state.FindOne(ctx, bson.D{{Key: "_id", Value: "east/apps"}}).Decode(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	first := read()
	if first.ConfirmedAt != first.ExportedAt {
		t.Fatalf("an export confirms: %+v", first)
	}
	at := first.ExportedAt.Time().Add(5 * time.Minute)
	if err := s.Confirm(ctx, sink.Confirmation{Cluster: "east", Inventory: "apps", Checksum: a.lastChecksum, At: at}); err != nil {
		t.Fatal(err)
	}
	if w := writes(rec.take()); len(w) != 1 || !strings.Contains(w[0], "rows_state") {
		t.Fatalf("a confirmation wrote %q, want one update of the state collection", w)
	}
	now := read()
	if !now.ConfirmedAt.Time().Equal(at.Truncate(time.Millisecond)) || now.ExportedAt != first.ExportedAt || now.Checksum != first.Checksum {
		t.Fatalf("after the confirmation: %+v (first %+v)", now, first)
	}
	if !maps.Equal(before, stored(t, rows, "east")) {
		t.Fatal("a confirmation changed rows")
	}
	if err := s.Confirm(ctx, sink.Confirmation{Cluster: "east", Inventory: "apps", Checksum: "sha256:other", At: at}); !errors.Is(err, sink.ErrNotHeld) {
		t.Fatalf("confirming another checksum: %v, want ErrNotHeld", err)
	}
}

// TestStateNamesItsWriter, against FerretDB: the state document names the agent version and
// instance of the last export or confirmation; an upgraded agent that confirms, or re-sends
// the same snapshot in full after losing its state, renames the writer without rewriting a
// row (every document's updated_at and digest stay).
func TestStateNamesItsWriter(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	s, rec := newSink(t, db, "east")
	v1 := export.Writer{Version: "v0.1.0", Instance: "kollect-system@4f9c"}
	a := &agent{sink: s, cluster: "east", inventory: "apps", writer: v1}
	rows := sinktest.Deployments("east", "apps", 20, 1)
	if err := a.export(ctx, rows); err != nil {
		t.Fatal(err)
	}
	docs, state := collection(t, db, "rows"), collection(t, db, "rows_state")
	writer := func() export.Writer {
		t.Helper()
		var st stateDoc
		if err := state.FindOne(ctx, bson.D{{Key: "_id", Value: "east/apps"}}).Decode(&st); err != nil {
			t.Fatal(err)
		}
		return export.Writer{Version: st.AgentVersion, Instance: st.AgentInstance}
	}
	marks := func() map[string]string {
		t.Helper()
		cur, err := docs.Find(ctx, bson.D{{Key: "cluster", Value: "east"}},
			options.Find().SetProjection(bson.D{{Key: "updated_at", Value: 1}, {Key: "digest", Value: 1}, {Key: "agent_version", Value: 1}}))
		if err != nil {
			t.Fatal(err)
		}
		var all []bson.M
		if err := cur.All(ctx, &all); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, d := range all {
			if _, ok := d["agent_version"]; ok {
				t.Fatalf("a row carries the writer: %v", d)
			}
			out[fmt.Sprint(d["_id"])] = fmt.Sprint(d["updated_at"], " ", d["digest"])
		}
		return out
	}
	if got := writer(); got != v1 {
		t.Fatalf("after an export the state names %+v, want %+v", got, v1)
	}
	before := marks()
	if len(before) != len(rows) {
		t.Fatalf("%d documents, want %d", len(before), len(rows))
	}

	v2 := export.Writer{Version: "v0.2.0", Instance: v1.Instance}
	rec.take()
	if err := s.Confirm(ctx, sink.Confirmation{Cluster: "east", Inventory: "apps", Checksum: a.lastChecksum, At: time.Now().UTC(), Writer: v2}); err != nil {
		t.Fatal(err)
	}
	if w := writes(rec.take()); len(w) != 1 || !strings.Contains(w[0], "rows_state") {
		t.Fatalf("the upgraded agent's confirmation wrote %q, want one update of the state collection", w)
	}
	if got := writer(); got != v2 {
		t.Fatalf("after the upgraded agent's confirmation the state names %+v, want %+v", got, v2)
	}
	restarted := &agent{sink: s, cluster: "east", inventory: "apps", writer: v2}
	b := restarted.batch(rows)
	b.Resync = true
	if err := s.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	if w := writes(rec.take()); len(w) != 0 {
		t.Fatalf("the upgraded agent's full re-send of the same snapshot wrote %q", w)
	}
	if after := marks(); !maps.Equal(before, after) {
		t.Fatalf("the upgraded agent rewrote rows: %v -> %v", before, after)
	}
}
