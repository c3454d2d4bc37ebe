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

// TestSecondWriterIsRefused, against FerretDB: two agents of cluster "east" (two instances)
// export one inventory into one database. The second's export and confirmation are refused
// with ErrWriterConflict: its only write is the contender mark on the state document (every
// row document's updated_at and digest stay, the state keeps the first's checksum and writer).
// The first's next confirmation and export succeed and report the contention. Once the first
// has not written for the window, the second takes over, and then the first is refused.
func TestSecondWriterIsRefused(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	s1, _ := newSink(t, db, "east")
	s2, rec2 := newSink(t, db, "east")
	w1 := export.Writer{Version: "v1.0.0", Instance: "kollect@1111"}
	w2 := export.Writer{Version: "v1.1.0", Instance: "kollect@2222"}
	const window = time.Minute
	first := &agent{sink: s1, cluster: "east", inventory: "apps", writer: w1}
	second := &agent{sink: s2, cluster: "east", inventory: "apps", writer: w2}
	if err := first.export(ctx, sinktest.Deployments("east", "apps", 20, 1)); err != nil {
		t.Fatal(err)
	}
	docs, stateColl := collection(t, db, "rows"), collection(t, db, "rows_state")
	state := func() stateDoc {
		t.Helper()
		var st stateDoc
		if err := stateColl.FindOne(ctx, bson.D{{Key: "_id", Value: "east/apps"}}).Decode(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	marks := func() map[string]string {
		t.Helper()
		cur, err := docs.Find(ctx, bson.D{}, options.Find().SetProjection(bson.D{{Key: "updated_at", Value: 1}, {Key: "digest", Value: 1}}))
		if err != nil {
			t.Fatal(err)
		}
		var all []bson.M
		if err := cur.All(ctx, &all); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, d := range all {
			out[fmt.Sprint(d["_id"])] = fmt.Sprint(d["updated_at"], " ", d["digest"])
		}
		return out
	}
	rowsBefore, stBefore := marks(), state()

	rec2.take()
	b := second.batch(sinktest.Deployments("east", "apps", 5, 2))
	b.ConflictWindow = window
	err := s2.Export(ctx, b)
	var refusal *sink.WriterConflictError
	if !errors.As(err, &refusal) || refusal.Holder != w1 || sink.ClassOf(err) != sink.Terminal {
		t.Fatalf("the second agent's export: %v, want a terminal *WriterConflictError naming %s", err, w1.Instance)
	}
	if !strings.Contains(err.Error(), w2.Instance) || !strings.Contains(err.Error(), "--cluster-name east") {
		t.Errorf("the refusal %q does not name the refused agent and the cluster name", err)
	}
	if w := writes(rec2.take()); len(w) != 1 || !strings.Contains(w[0], "rows_state") {
		t.Fatalf("the refused export wrote %q, want one update of the state document", w)
	}
	if after := marks(); !maps.Equal(after, rowsBefore) {
		t.Fatalf("the refused export rewrote rows: %v -> %v", rowsBefore, after)
	}
	st := state()
	if st.Checksum != stBefore.Checksum || st.AgentInstance != w1.Instance || st.ExportedAt != stBefore.ExportedAt || st.ConfirmedAt != stBefore.ConfirmedAt {
		t.Fatalf("the refused export changed the state: %+v -> %+v", stBefore, st)
	}
	if st.ContenderInstance != w2.Instance || st.ContenderVersion != w2.Version || st.ContendedAt == 0 {
		t.Fatalf("the state's contender mark after the refusal: %+v, want %+v", st, w2)
	}
	err = s2.Confirm(ctx, sink.Confirmation{Cluster: "east", Inventory: "apps", Checksum: stBefore.Checksum, At: time.Now().UTC(), Writer: w2, ConflictWindow: window})
	if !errors.Is(err, sink.ErrWriterConflict) {
		t.Fatalf("the second agent's confirmation: %v, want ErrWriterConflict", err)
	}
	if st := state(); st.AgentInstance != w1.Instance || st.ConfirmedAt != stBefore.ConfirmedAt {
		t.Fatalf("the refused confirmation changed the state: %+v", st)
	}

	at := time.Now().UTC()
	err = s1.Confirm(ctx, sink.Confirmation{Cluster: "east", Inventory: "apps", Checksum: first.lastChecksum, At: at, Writer: w1, ConflictWindow: window})
	var contended *sink.ContendedError
	if !errors.As(err, &contended) || contended.Contender != w2 {
		t.Fatalf("the holder's confirmation: %v, want a *sink.ContendedError naming %s", err, w2.Instance)
	}
	if st := state(); st.ConfirmedAt.Time().UnixMilli() != at.UnixMilli() {
		t.Fatalf("the holder's contended confirmation did not move confirmed_at: %v, want %v", st.ConfirmedAt.Time(), at)
	}
	b = first.batch(sinktest.Deployments("east", "apps", 20, 3))
	b.ConflictWindow = window
	if err := s1.Export(ctx, b); !errors.As(err, &contended) {
		t.Fatalf("the holder's export: %v, want a *sink.ContendedError", err)
	}
	first.accept()
	if st := state(); st.Checksum != first.lastChecksum || len(stored(t, docs, "east")) != 20 {
		t.Fatalf("the holder's contended export is not in the sink: %+v", st)
	}
	err = s1.Confirm(ctx, sink.Confirmation{Cluster: "east", Inventory: "apps", Checksum: first.lastChecksum,
		At: state().ContendedAt.Time().Add(window), Writer: w1, ConflictWindow: window})
	if err != nil {
		t.Fatalf("the holder's confirmation a window after the contention: %v, want nil", err)
	}

	st = state()
	last := st.ExportedAt.Time()
	if c := st.ConfirmedAt.Time(); c.After(last) {
		last = c
	}
	b = second.batch(sinktest.Deployments("east", "apps", 5, 2))
	b.ConflictWindow, b.Envelope.ExportedAt = window, last.Add(window)
	if err := s2.Export(ctx, b); err != nil {
		t.Fatalf("the second agent's export a window after the first's last write: %v, want it taken over", err)
	}
	second.accept()
	if st := state(); st.AgentInstance != w2.Instance || st.Checksum != second.lastChecksum || len(stored(t, docs, "east")) != 5 {
		t.Fatalf("after the takeover the state is %+v, want the second's and its 5 rows", st)
	}
	b = first.batch(sinktest.Deployments("east", "apps", 20, 4))
	b.ConflictWindow, b.Envelope.ExportedAt = window, last.Add(window+time.Second)
	if err := s1.Export(ctx, b); !errors.Is(err, sink.ErrWriterConflict) {
		t.Fatalf("the first agent, back after the takeover: %v, want ErrWriterConflict", err)
	}
}
