package nats

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

// streamState is what the server says of a stream: its message count and last sequence.
func (c *client) streamState(t *testing.T, stream string) (msgs, last uint64) {
	t.Helper()
	st, err := c.js.Stream(t.Context(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs, info.State.LastSeq
}

// TestSecondWriterIsRefused: against nats-server with JetStream, two agents of cluster c1
// (two instances) export one inventory to one stream. The second's export and confirmation
// are refused with ErrWriterConflict before anything is buffered: the stream gains one
// message, the holder's state again with the contender mark, and no event (the row messages
// and the key-value bucket's stream are as they were, counted by the server). The holder's
// confirmation and export succeed and report the contention, keeping the mark. Once the
// holder has not written for the window, the second takes over.
func TestSecondWriterIsRefused(t *testing.T) {
	ctx := t.Context()
	const stream, bucket, window = "WRITERS", "writers", time.Minute
	w1 := export.Writer{Version: "v1.0.0", Instance: "kollect@1111"}
	w2 := export.Writer{Version: "v1.1.0", Instance: "kollect@2222"}
	first := newSink(t, spec(server.URL, stream, bucket), defaultEnv)
	second := newSink(t, spec(server.URL, stream, bucket), defaultEnv)
	ex1, ex2 := exporter{Writer: w1}, exporter{Writer: w2}
	t0 := time.Now().UTC().Truncate(time.Second)
	export1 := func(snap *export.Snapshot, at time.Time) error {
		b := ex1.Batch(snap)
		b.Envelope.ExportedAt, b.ConflictWindow = at, window
		err := first.Export(ctx, b)
		if err == nil || errors.Is(err, sink.ErrContended) {
			ex1.Accepted = snap
		}
		return err
	}
	held := export.NewSnapshot([]export.Row{row("a", 1), row("b", 1), row("c", 1)})
	if err := export1(held, t0); err != nil {
		t.Fatal(err)
	}
	c := dial(t, server.URL)
	rowsBefore := c.messages(t, stream)
	msgsBefore, lastBefore := c.streamState(t, stream)
	kvMsgs, kvLast := c.streamState(t, "KV_"+bucket)

	// The second agent's first batch is full: without the check it would publish an upsert of
	// a and deletes of b and c (read from the bucket), and delete their bucket entries.
	b := ex2.Batch(export.NewSnapshot([]export.Row{row("a", 7)}))
	b.Envelope.ExportedAt, b.ConflictWindow = t0.Add(10*time.Second), window
	err := second.Export(ctx, b)
	var conflict *sink.WriterConflictError
	if !errors.As(err, &conflict) || conflict.Holder != w1 || conflict.Self != w2 || sink.ClassOf(err) != sink.Terminal {
		t.Fatalf("the second writer's export: %v, want a terminal WriterConflictError naming %v", err, w1)
	}
	if st := second.BufferStats(); st.Pending != 0 || st.Delivered != 0 {
		t.Fatalf("the refused export buffered events: %+v", st)
	}
	if msgs, last := c.streamState(t, stream); msgs != msgsBefore+1 || last != lastBefore+1 {
		t.Fatalf("the refused export: stream holds %d messages up to %d (before %d up to %d), want the contender mark alone",
			msgs, last, msgsBefore, lastBefore)
	}
	if msgs, last := c.streamState(t, "KV_"+bucket); msgs != kvMsgs || last != kvLast {
		t.Fatalf("the refused export wrote the bucket: %d messages up to %d, before %d up to %d", msgs, last, kvMsgs, kvLast)
	}
	if got := c.messages(t, stream); !reflect.DeepEqual(seqs(got), seqs(rowsBefore)) {
		t.Fatalf("the refused export published row messages: sequences %v, before %v", seqs(got), seqs(rowsBefore))
	}
	states := c.states(t, stream)
	last := states[len(states)-1]
	if last.Writer != w1 || last.Checksum != held.Checksum || last.Contender != w2 || !last.ContendedAt.Equal(b.Envelope.ExportedAt) {
		t.Fatalf("after the refusal the state is %+v, want writer %v, checksum %s, contender %v", last, w1, held.Checksum, w2)
	}

	err = second.Confirm(ctx, sink.Confirmation{Cluster: "c1", Inventory: "pods", Checksum: held.Checksum,
		At: t0.Add(20 * time.Second), Writer: w2, ConflictWindow: window})
	if !errors.Is(err, sink.ErrWriterConflict) {
		t.Fatalf("the second writer's confirmation: %v, want ErrWriterConflict", err)
	}

	// The holder confirms, then exports a change: both succeed, name the contender, and keep
	// its mark in the state.
	err = first.Confirm(ctx, sink.Confirmation{Cluster: "c1", Inventory: "pods", Checksum: held.Checksum,
		At: t0.Add(30 * time.Second), Writer: w1, ConflictWindow: window})
	var contended *sink.ContendedError
	if !errors.As(err, &contended) || contended.Contender != w2 {
		t.Fatalf("the holder's confirmation: %v, want a ContendedError naming %v", err, w2)
	}
	changed := export.NewSnapshot([]export.Row{row("a", 2), row("b", 1), row("c", 1)})
	if err := export1(changed, t0.Add(40*time.Second)); !errors.As(err, &contended) || contended.Contender != w2 {
		t.Fatalf("the holder's export: %v, want a ContendedError naming %v", err, w2)
	}
	assertState(t, "stream", fold(t, c.messages(t, stream)), changed)
	if states := c.states(t, stream); states[len(states)-1].Writer != w1 || states[len(states)-1].Checksum != changed.Checksum ||
		states[len(states)-1].Contender != w2 {
		t.Fatalf("after the holder's export the state is %+v", states[len(states)-1])
	}

	// The holder stops: a window after its last write, the second takes over.
	takeover := export.NewSnapshot([]export.Row{row("a", 7)})
	b = ex2.Batch(takeover)
	b.Envelope.ExportedAt, b.ConflictWindow = t0.Add(40*time.Second+window), window
	if err := second.Export(ctx, b); err != nil {
		t.Fatalf("taking over from a writer gone for the window: %v", err)
	}
	assertState(t, "stream", fold(t, c.messages(t, stream)), takeover)
	assertState(t, "bucket", c.bucket(t, bucket), takeover)
	if states := c.states(t, stream); states[len(states)-1].Writer != w2 {
		t.Fatalf("after the takeover the state names %v", states[len(states)-1].Writer)
	}
	// And the first, back, is refused in turn.
	err = export1(export.NewSnapshot([]export.Row{row("a", 3)}), t0.Add(50*time.Second+window))
	if !errors.As(err, &conflict) || conflict.Holder != w2 {
		t.Fatalf("the old holder's export after the takeover: %v, want a WriterConflictError naming %v", err, w2)
	}
}

// seqs lists the messages' stream sequences.
func seqs(msgs []*jetstream.RawStreamMsg) []uint64 {
	out := make([]uint64, len(msgs))
	for i, m := range msgs {
		out[i] = m.Sequence
	}
	return out
}

// TestStateWriteExpectsTheStateItRead: against nats-server, a holder whose state in memory
// is older than the state subject's last message (a contender's mark published after the
// holder read) has its state publish refused by the server (expected last subject
// sequence), not stored over the mark; its retry reads the mark and reports it.
func TestStateWriteExpectsTheStateItRead(t *testing.T) {
	ctx := t.Context()
	const stream, window = "EXPECTS", time.Minute
	w1 := export.Writer{Version: "v1.0.0", Instance: "kollect@1111"}
	w2 := export.Writer{Version: "v1.0.0", Instance: "kollect@2222"}
	first := newSink(t, spec(server.URL, stream, ""), defaultEnv)
	second := newSink(t, spec(server.URL, stream, ""), defaultEnv)
	ex1, ex2 := exporter{Writer: w1}, exporter{Writer: w2}
	t0 := time.Now().UTC().Truncate(time.Second)
	snap := export.NewSnapshot([]export.Row{row("a", 1)})
	b := ex1.Batch(snap)
	b.Envelope.ExportedAt, b.ConflictWindow = t0, window
	if err := first.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	ex1.Accepted = snap
	stale := first.states["c1/pods"]
	b = ex2.Batch(export.NewSnapshot([]export.Row{row("a", 9)}))
	b.Envelope.ExportedAt, b.ConflictWindow = t0.Add(time.Second), window
	if err := second.Export(ctx, b); !errors.Is(err, sink.ErrWriterConflict) {
		t.Fatalf("the second writer's export: %v, want ErrWriterConflict", err)
	}
	c := dial(t, server.URL)
	_, lastBefore := c.streamState(t, stream)

	// The holder's state write as if its read had come before the mark.
	changed := export.NewSnapshot([]export.Row{row("a", 2)})
	b = ex1.Batch(changed)
	b.Envelope.ExportedAt, b.ConflictWindow = t0.Add(2*time.Second), window
	first.states["c1/pods"] = stale
	err := first.recordExport(ctx, b)
	if err == nil || sink.ClassOf(err) != sink.Transient {
		t.Fatalf("a state publish expecting a replaced message: %v, want a transient error", err)
	}
	if _, last := c.streamState(t, stream); last != lastBefore {
		t.Fatalf("the refused state publish was stored: last sequence %d → %d", lastBefore, last)
	}
	var contended *sink.ContendedError
	if err := first.Export(ctx, b); !errors.As(err, &contended) || contended.Contender != w2 {
		t.Fatalf("the holder's retry: %v, want a ContendedError naming %v", err, w2)
	}
	if states := c.states(t, stream); states[len(states)-1].Checksum != changed.Checksum || states[len(states)-1].Contender != w2 {
		t.Fatalf("after the retry the state is %+v", states[len(states)-1])
	}
}
