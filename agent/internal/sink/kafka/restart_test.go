package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

// restartRows are 40 rows, and the same with five changed and two deleted.
func restartRows() (before, after *export.Snapshot) {
	var a, b []export.Row
	for i := range 40 {
		a = append(a, row(fmt.Sprint(i), 1))
		switch {
		case i%8 == 3:
			b = append(b, row(fmt.Sprint(i), 2))
		case i == 12 || i == 33:
		default:
			b = append(b, row(fmt.Sprint(i), 1))
		}
	}
	return export.NewSnapshot(a), export.NewSnapshot(b)
}

// TestRestartAfterAnUnfinishedExport, against kfake (a stand-in for Kafka): the agent stops in
// the middle of an export, after its events (five upserts, two deletes) reached the broker and
// before the state record, and the data returns to the snapshot the state record names. The
// state record then is no account of what consumers hold: the restarted sink's confirmation is
// not held, and its first resync produces the seven rows the unfinished export touched, as
// they are, and nothing else (no state record: it names the snapshot already).
func TestRestartAfterAnUnfinishedExport(t *testing.T) {
	ctx := t.Context()
	const topic = "unfinished"
	s1, s2 := restartRows()
	writer := export.Writer{Version: "v1.0.0", Instance: "kollect@unfinished"}
	first := newSink(t, spec(broker.Addr, topic), sink.Env{})
	ex := exporter{Writer: writer}
	if err := ex.Export(ctx, first, s1); err != nil {
		t.Fatal(err)
	}
	if err := first.buf.Export(ctx, ex.Batch(s2), first.send); err != nil { // the events, not the state record
		t.Fatal(err)
	}
	first.Close()

	restarted := newSink(t, spec(broker.Addr, topic), sink.Env{})
	err := restarted.Confirm(ctx, sink.Confirmation{Cluster: "c1", Inventory: "pods", Checksum: s1.Checksum, Writer: writer})
	if !errors.Is(err, sink.ErrNotHeld) || !strings.Contains(err.Error(), "did not finish") {
		t.Fatalf("confirming the state record's snapshot after an unfinished export: %v, want not held", err)
	}
	before := partitionEnds(t, topic)
	resync := exporter{Gen: 10, Writer: writer}
	b := resync.Batch(s1)
	b.PreviousChecksum, b.Resync = s1.Checksum, true
	if err := restarted.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	byKey := kcatAll(t, broker.Addr, topic)
	upserts := 0
	for key, msgs := range byKey {
		for _, m := range msgs {
			if int64(m.Offset) < before[int32(m.Partition)] {
				continue
			}
			if ev := m.event(t); ev.Type != export.ChangeUpsert || !strings.Contains(key, "/pods/") {
				t.Errorf("record %s@%d/%d after the unfinished export: %s %s, want an upsert of a row", key, m.Partition, m.Offset, ev.Type, ev.Key)
			}
			upserts++
		}
	}
	if upserts != 7 {
		t.Errorf("the restart produced %d records, want the 7 rows the unfinished export touched", upserts)
	}
	assertState(t, compacted(t, kcat(t, broker.Addr, topic)), s1)
	if err := restarted.Confirm(ctx, sink.Confirmation{Cluster: "c1", Inventory: "pods", Checksum: s1.Checksum, Writer: writer}); err != nil {
		t.Fatalf("confirming after the restart put the rows back: %v", err)
	}
}

// TestRestartReadBackFailsOnARecordItCannotRead, against kfake: a record under the
// inventory's headers whose value is no change event leaves what consumers hold of its key
// unknown; the restarted sink's read-back fails, terminal, naming it, rather than skip it
// (a delete owed for that key would be lost).
func TestRestartReadBackFailsOnARecordItCannotRead(t *testing.T) {
	ctx := t.Context()
	const topic = "unreadable"
	s1, s2 := restartRows()
	var ex exporter
	if err := ex.Export(ctx, newSink(t, spec(broker.Addr, topic), sink.Env{}), s1); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker.Addr), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	bad := &kgo.Record{Key: []byte("c1/pods/pods/odd"), Value: []byte("not json"), Headers: []kgo.RecordHeader{
		{Key: hCluster, Value: []byte("c1")}, {Key: hInventory, Value: []byte("pods")}, {Key: hEvent, Value: []byte("upsert")}}}
	if err := cl.ProduceSync(ctx, bad).FirstErr(); err != nil {
		t.Fatal(err)
	}
	restarted := exporter{Gen: 10}
	b := restarted.Batch(s2)
	b.PreviousChecksum = s1.Checksum
	err = newSink(t, spec(broker.Addr, topic), sink.Env{}).Export(ctx, b)
	if sink.ClassOf(err) != sink.Terminal || !strings.Contains(fmt.Sprint(err), "c1/pods/pods/odd") {
		t.Fatalf("a restart over an unreadable record: %v, want a terminal error naming it", err)
	}
}

// TestReadBackGoesOnWhereADeadlineStoppedIt: a scan of the topic that its context ends goes
// on, called again, from the record after the last one it read: an export whose deadline ends
// a long read-back leaves it for the next attempt, and each record is read once.
func TestReadBackGoesOnWhereADeadlineStoppedIt(t *testing.T) {
	ctx := t.Context()
	const topic = "resumed"
	var rows []export.Row
	for i := range 500 {
		rows = append(rows, row(fmt.Sprint(i), 1))
	}
	sk := newSink(t, spec(broker.Addr, topic), sink.Env{})
	var ex exporter
	if err := ex.Export(ctx, sk, export.NewSnapshot(rows)); err != nil {
		t.Fatal(err)
	}
	from, until, total, err := sk.topicRange(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	cut, cancel := context.WithCancel(ctx)
	read := 0
	err = sk.scan(cut, from, until, func(r *kgo.Record) bool {
		seen[fmt.Sprint(r.Partition, "/", r.Offset)]++
		if read++; read == 10 {
			cancel() // the export's deadline
		}
		return true
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the cut scan: %v after %d records, want it ended by its context", err, read)
	}
	first := read
	if err := sk.scan(ctx, from, until, func(r *kgo.Record) bool {
		seen[fmt.Sprint(r.Partition, "/", r.Offset)]++
		read++
		return true
	}); err != nil {
		t.Fatal(err)
	}
	for at, n := range seen {
		if n != 1 {
			t.Errorf("record %s read %d times", at, n)
		}
	}
	if int64(len(seen)) != total || first >= read {
		t.Fatalf("read %d of %d records (%d before the cut), want every one once, in two parts", len(seen), total, first)
	}
}
