package mongodb

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

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
