package kafka

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

// TestSecondWriterIsRefused: against kfake (a stand-in for Kafka), two agents of cluster c1
// (two instances) export one inventory to one topic. The second's export and confirmation
// are refused with ErrWriterConflict before anything is buffered: no row event and no
// tombstone — every partition's high-water mark stays, except the state key's, which moves by
// the one record of the contender mark — and every row record is as it was. The holder's
// confirmation and export succeed and report the contention, keeping the mark. Once the
// holder has not written for the window, the second takes over.
func TestSecondWriterIsRefused(t *testing.T) {
	ctx := t.Context()
	const topic, window = "writers", time.Minute
	w1 := export.Writer{Version: "v1.0.0", Instance: "kollect@1111"}
	w2 := export.Writer{Version: "v1.1.0", Instance: "kollect@2222"}
	first := newSink(t, spec(broker.Addr, topic), sink.Env{})
	second := newSink(t, spec(broker.Addr, topic), sink.Env{})
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
	rowsBefore := kcat(t, broker.Addr, topic)
	endsBefore := partitionEnds(t, topic)
	statePartition := statePartitioner.ForTopic(topic).Partition(&kgo.Record{Key: []byte(stateKey("c1", "pods"))}, len(endsBefore))

	// The second agent's first batch is full: without the check it would upsert a and delete
	// b and c (with tombstones).
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
	endsAfter := partitionEnds(t, topic)
	for p, end := range endsBefore {
		want := end
		if int(p) == statePartition {
			want++ // the contender mark
		}
		if endsAfter[p] != want {
			t.Errorf("partition %d: high-water mark %d → %d after the refused export, want %d", p, end, endsAfter[p], want)
		}
	}
	if got := kcat(t, broker.Addr, topic); !reflect.DeepEqual(got, rowsBefore) {
		t.Fatalf("the refused export changed the row records:\n%v\n→ %v", rowsBefore, got)
	}
	states := stateRecords(t, topic)
	last := states[len(states)-1]
	if last.Writer != w1 || last.Checksum != held.Checksum || last.Contender != w2 || !last.ContendedAt.Equal(b.Envelope.ExportedAt) {
		t.Fatalf("after the refusal the state record is %+v, want writer %v, checksum %s, contender %v", last, w1, held.Checksum, w2)
	}

	err = second.Confirm(ctx, sink.Confirmation{Cluster: "c1", Inventory: "pods", Checksum: held.Checksum,
		At: t0.Add(20 * time.Second), Writer: w2, ConflictWindow: window})
	if !errors.Is(err, sink.ErrWriterConflict) {
		t.Fatalf("the second writer's confirmation: %v, want ErrWriterConflict", err)
	}

	// The holder confirms, then exports a change: both succeed, name the contender, and keep
	// its mark in the state record.
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
	assertState(t, compacted(t, kcat(t, broker.Addr, topic)), changed)
	if last := stateRecords(t, topic); last[len(last)-1].Writer != w1 || last[len(last)-1].Checksum != changed.Checksum ||
		last[len(last)-1].Contender != w2 {
		t.Fatalf("after the holder's export the state record is %+v", last[len(last)-1])
	}

	// The holder stops: a window after its last write, the second takes over.
	b = ex2.Batch(export.NewSnapshot([]export.Row{row("a", 7)}))
	b.Envelope.ExportedAt, b.ConflictWindow = t0.Add(40*time.Second+window), window
	if err := second.Export(ctx, b); err != nil {
		t.Fatalf("taking over from a writer gone for the window: %v", err)
	}
	assertState(t, compacted(t, kcat(t, broker.Addr, topic)), export.NewSnapshot([]export.Row{row("a", 7)}))
	if last := stateRecords(t, topic); last[len(last)-1].Writer != w2 {
		t.Fatalf("after the takeover the state record names %v", last[len(last)-1].Writer)
	}
	// And the first, back, is refused in turn.
	err = export1(export.NewSnapshot([]export.Row{row("a", 3)}), t0.Add(50*time.Second+window))
	if !errors.As(err, &conflict) || conflict.Holder != w2 {
		t.Fatalf("the old holder's export after the takeover: %v, want a WriterConflictError naming %v", err, w2)
	}
}
