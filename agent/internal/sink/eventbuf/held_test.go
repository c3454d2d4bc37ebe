package eventbuf

import (
	"context"
	"slices"
	"testing"
	"time"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

// heldOf is what consumers hold after receiving rows.
func heldOf(rows ...export.Row) Held {
	h := NewHeld()
	for i := range rows {
		h.Rows[rows[i].Key().String()] = rows[i].CanonicalJSON()
	}
	return h
}

// fullBatch is a batch without a baseline, as the delivery worker sends after a restart.
func fullBatch(s *export.Snapshot, resync bool) *sink.Batch {
	return &sink.Batch{Envelope: export.Envelope{Cluster: "c1", Inventory: "inv", Checksum: s.Checksum, Rows: s.Rows,
		ExportedAt: time.Unix(1_800_000_000, 0)}, Diff: export.Compute(nil, s), Resync: resync}
}

func keysOf(rows []export.Row) []string {
	var out []string
	for i := range rows {
		out = append(out, rows[i].UID)
	}
	return out
}

// TestReconcileIsTheChangeFromWhatConsumersHold: a batch without a baseline becomes the exact
// change from what consumers hold, in canonical order: the rows they lack, the rows they hold
// with other content, the rows they hold that are gone (with the row they hold); staged by
// the buffer, exactly those events are sent, and nothing for an unchanged snapshot, also when
// it is a periodic resync.
func TestReconcileIsTheChangeFromWhatConsumersHold(t *testing.T) {
	held := heldOf(row("a", 1), row("b", 1), row("c", 1), row("d", 1))
	next := export.NewSnapshot([]export.Row{row("a", 1), row("b", 2), row("e", 1)})
	b, err := Reconcile(fullBatch(next, false), held)
	if err != nil {
		t.Fatal(err)
	}
	if b.Diff.Full || b.PreviousChecksum != held.ID() {
		t.Fatalf("reconciled batch: full %v, previous %q, want a diff from %q", b.Diff.Full, b.PreviousChecksum, held.ID())
	}
	if got := [3][]string{keysOf(b.Diff.Added), keysOf(b.Diff.Changed), keysOf(b.Diff.Deleted)}; !slices.Equal(got[0], []string{"e"}) ||
		!slices.Equal(got[1], []string{"b"}) || !slices.Equal(got[2], []string{"c", "d"}) {
		t.Fatalf("added, changed, deleted = %v, want [e] [b] [c d]", got)
	}
	if d := b.Diff.Deleted[0]; string(d.CanonicalJSON()) != string(held.Rows[d.Key().String()]) {
		t.Fatalf("the delete of c carries %s, want the row consumers hold", d.CanonicalJSON())
	}
	buf := New(100)
	c := &consumer{state: map[string]string{}}
	if err := buf.Export(context.Background(), b, c.sender(-1)); err != nil {
		t.Fatal(err)
	}
	var sent []string
	for _, e := range c.seen {
		sent = append(sent, string(e.Type)+" "+e.Row.UID)
		if e.Resync {
			t.Errorf("event %s %s carries the resync mark", e.Type, e.Key)
		}
	}
	if want := []string{"upsert e", "upsert b", "delete c", "delete d"}; !slices.Equal(sent, want) {
		t.Fatalf("sent %v, want %v", sent, want)
	}
	if sum, owed, known := buf.Delivered("c1", "inv"); sum != next.Checksum || owed != 0 || !known {
		t.Fatalf("delivered = %q, %d owed, known %v, want the snapshot's checksum", sum, owed, known)
	}

	for _, resync := range []bool{false, true} {
		same, err := Reconcile(fullBatch(next, resync), heldOf(next.Rows...))
		if err != nil {
			t.Fatal(err)
		}
		buf, c := New(100), &consumer{state: map[string]string{}}
		if err := buf.Export(context.Background(), same, c.sender(-1)); err != nil || len(c.seen) != 0 {
			t.Fatalf("unchanged snapshot (resync %v): %d events sent (%v), want none", resync, len(c.seen), err)
		}
	}
	for _, resync := range []bool{false, true} {
		buf, c := New(100), &consumer{state: map[string]string{}}
		if err := buf.Export(context.Background(), Holding(fullBatch(next, resync)), c.sender(-1)); err != nil || len(c.seen) != 0 {
			t.Fatalf("a held snapshot (resync %v): %d events sent (%v), want none", resync, len(c.seen), err)
		}
	}
}

// TestReconcileSendsUncertainKeysAgain: keys whose events may or may not have reached
// consumers are sent again in their current state (an upsert, or a delete with the row the
// uncertain event carried when consumers may hold it and the snapshot does not).
func TestReconcileSendsUncertainKeysAgain(t *testing.T) {
	held := heldOf(row("a", 1), row("b", 1))
	a2, z := row("a", 2), row("z", 3)
	held.Uncertain["c1/inv/t/a"] = a2.CanonicalJSON() // maybe reached consumers
	held.Uncertain["c1/inv/t/z"] = z.CanonicalJSON()  // maybe added, now gone
	next := export.NewSnapshot([]export.Row{row("a", 1), row("b", 1)})
	b, err := Reconcile(fullBatch(next, true), held)
	if err != nil {
		t.Fatal(err)
	}
	if got := [3][]string{keysOf(b.Diff.Added), keysOf(b.Diff.Changed), keysOf(b.Diff.Deleted)}; len(got[0]) != 0 ||
		!slices.Equal(got[1], []string{"a"}) || !slices.Equal(got[2], []string{"z"}) {
		t.Fatalf("added, changed, deleted = %v, want [] [a] [z]", got)
	}
	if held.ID() == heldOf(row("a", 1), row("b", 1)).ID() {
		t.Fatal("uncertain keys do not change the held ID")
	}
}

// TestForgetDropsWhatTheBufferKnew: Forget drops owed events (the pending gauge with them),
// and Delivered then knows nothing of the inventory.
func TestForgetDropsWhatTheBufferKnew(t *testing.T) {
	buf := New(100)
	c := &consumer{state: map[string]string{}}
	s := export.NewSnapshot([]export.Row{row("a", 1), row("b", 1)})
	if err := buf.Export(context.Background(), Holding(fullBatch(export.NewSnapshot(nil), false)), c.sender(-1)); err != nil {
		t.Fatal(err)
	}
	b := &sink.Batch{Envelope: fullBatch(s, false).Envelope, Diff: export.Compute(export.NewSnapshot(nil), s),
		PreviousChecksum: export.NewSnapshot(nil).Checksum}
	if err := buf.Export(context.Background(), b, c.sender(0)); err == nil {
		t.Fatal("an export whose events were not acknowledged succeeded")
	}
	if _, owed, known := buf.Delivered("c1", "inv"); owed != 2 || !known || buf.Stats().Pending != 2 {
		t.Fatalf("after a failed export: %d owed, known %v, pending %d, want 2 owed", owed, known, buf.Stats().Pending)
	}
	buf.Forget("c1", "inv")
	if sum, owed, known := buf.Delivered("c1", "inv"); sum != "" || owed != 0 || known || buf.Stats().Pending != 0 {
		t.Fatalf("after Forget: %q, %d owed, known %v, pending %d, want nothing known", sum, owed, known, buf.Stats().Pending)
	}
}
