package kafka_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/inventory/delivery"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/backends"
	"kollect.dev/agent/internal/sink/kafka"
	"kollect.dev/agent/internal/sink/sinktest"
	"kollect.dev/api/v1alpha1"
)

// These tests drive the Kafka sink as the shipped agent has it: built by the sink table with a
// metrics registry (which wraps event sinks to report their buffers), called by a delivery
// worker, against kfake (franz-go's Kafka stand-in, started by TestMain). The topic is read
// back with a raw franz-go consumer of their own, never through the sink. A sink tested only
// as a *kafka.Sink passed every contract while the agent's copy of it was not a
// sink.Confirmer nor a sink.Purger: confirmations were connection tests that wrote nothing,
// and a deletionPolicy Delete left the state record.

const inventory = "team-a/workloads"

// shipped builds the sink of cluster as the agent does: the table's factory, with metrics, and
// the topic template {cluster}-events (so the expansion is exercised too); it returns the sink
// and the expanded topic.
func shipped(t *testing.T, prefix, cluster string) (sink.Sink, string) {
	t.Helper()
	obj := &v1alpha1.KollectEventSink{ObjectMeta: metav1.ObjectMeta{Name: "events", Namespace: "kollect", UID: "u1"},
		Spec: v1alpha1.KollectEventSinkSpec{Type: v1alpha1.EventSinkKafka, Mode: v1alpha1.EventModeChanges, BufferSize: 10_000,
			Timeout: metav1.Duration{Duration: 20 * time.Second},
			Kafka: &v1alpha1.KafkaSinkConfig{Brokers: []string{kafka.BrokerAddr()}, Topic: prefix + "." + kafka.ClusterPlaceholder + ".events",
				CreateTopic: true, Partitions: 3}}}
	factory := backends.Factories(prometheus.NewRegistry())[sink.Key(v1alpha1.SinkFamilyEvent, string(v1alpha1.EventSinkKafka))]
	s, err := factory(t.Context(), obj, sink.Env{Cluster: cluster, Namespace: "kollect", Name: "events",
		Secrets: sinktest.Secrets(nil), Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, prefix + "." + cluster + ".events"
}

// agentWorker runs a delivery worker on s, confirming every interval (0: never), until the
// test ends.
func agentWorker(t *testing.T, s sink.Sink, confirm time.Duration) *delivery.Worker {
	w := delivery.NewWorker(delivery.WorkerOptions{Name: "event/kollect/events", SinkType: "event/kafka", Inventory: inventory, Sink: s,
		Timeout: 20 * time.Second, Metrics: delivery.NewMetrics(prometheus.NewRegistry()), Log: testr.New(t), ConfirmInterval: confirm})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

// job is a complete snapshot of n deployments of cluster (version v) written by writer.
func job(cluster string, n, v int, writer export.Writer) *delivery.Job {
	cov := []export.Coverage{sinktest.Complete("deployments", int64(n))}
	return &delivery.Job{Snapshot: export.NewSnapshot(sinktest.Deployments(cluster, inventory, n, v)), Cluster: cluster, Inventory: inventory,
		Writer: writer, Complete: true, Coverage: cov, CoverageDigest: export.CoverageDigest(cov)}
}

// accepted waits until the worker's sink accepted checksum.
func accepted(t *testing.T, w *delivery.Worker, checksum string) delivery.Status {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		st := w.Status()
		if st.Checksum == checksum {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sink did not accept %s: status %+v", export.ShortChecksum(checksum), st)
		}
	}
}

// endOffsets lists the topic's end offsets per partition, as the broker reports them.
func endOffsets(t *testing.T, topic string) map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafka.BrokerAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	offs, err := kadm.NewClient(cl).ListEndOffsets(t.Context(), topic)
	if err == nil {
		err = offs.Error()
	}
	if err != nil {
		t.Fatalf("end offsets of %s: %v", topic, err)
	}
	out := map[int32]int64{}
	offs.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// readTopic reads every record of the topic, partition by partition up to the end offsets
// the broker lists now, with a raw franz-go consumer.
func readTopic(t *testing.T, topic string) []*kgo.Record {
	t.Helper()
	ends := endOffsets(t, topic)
	from := map[int32]kgo.Offset{}
	left := 0
	for p, end := range ends {
		if end > 0 {
			from[p] = kgo.NewOffset().AtStart()
			left++
		}
	}
	if left == 0 {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafka.BrokerAddr()), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var out []*kgo.Record
	for left > 0 {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("reading %s: %v", topic, err)
		}
		fetches.EachError(func(_ string, p int32, err error) { t.Fatalf("reading %s partition %d: %v", topic, p, err) })
		fetches.EachRecord(func(r *kgo.Record) {
			if r.Offset >= ends[r.Partition] {
				return
			}
			out = append(out, r)
			if r.Offset+1 == ends[r.Partition] {
				left--
			}
		})
	}
	return out
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// stateKey is the state record's key, as docs/sinks/kafka.md gives it.
func stateKey(cluster string) string { return cluster + "/" + inventory + "/_state" }

// states decodes the cluster's state records, oldest first.
func states(t *testing.T, records []*kgo.Record, cluster string) []export.StateRecord {
	t.Helper()
	var out []export.StateRecord
	for _, r := range records {
		if string(r.Key) != stateKey(cluster) || r.Value == nil {
			continue
		}
		if header(r, "kollect-event") != "state" {
			t.Fatalf("record %s@%d/%d has kollect-event %q, want state", r.Key, r.Partition, r.Offset, header(r, "kollect-event"))
		}
		var rec export.StateRecord
		if err := json.Unmarshal(r.Value, &rec); err != nil {
			t.Fatal(err)
		}
		out = append(out, rec)
	}
	return out
}

// TestShippedSinkConfirmsQuietData: the agent's Kafka sink, its data unchanged, confirms at
// every confirm interval as docs/sinks/kafka.md says: the state record produced again with a
// new confirmedAt and the confirming writer, the checksum, rows, coverage and exportedAt as
// exported, and no row record produced.
func TestShippedSinkConfirmsQuietData(t *testing.T) {
	const every = time.Second
	s, topic := shipped(t, fmt.Sprintf("confirm%d", time.Now().UnixNano()), "east")
	if _, ok := s.(sink.Confirmer); !ok {
		t.Errorf("the agent's kafka sink (%T) is not a sink.Confirmer: its confirmations are connection tests", s)
	}
	writer := export.Writer{Version: "v1.2.3", Instance: "kollect@east-uid"}
	w := agentWorker(t, s, every)
	j := job("east", 5, 1, writer)
	w.Offer(j)
	accepted(t, w, j.Snapshot.Checksum)
	// The export's state record and three confirmations: waited for, not counted after a
	// fixed sleep, so a loaded machine makes the test slower, not wrong.
	var (
		records []*kgo.Record
		recs    []export.StateRecord
	)
	for deadline := time.Now().Add(30*every + 30*time.Second); ; time.Sleep(every / 2) {
		records = readTopic(t, topic)
		recs = states(t, records, "east")
		if len(recs) >= 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d state records of quiet data with a confirm interval of %s, want the export's and at least 3 confirmations: %+v",
				len(recs), every, recs)
		}
	}
	first := recs[0]
	for i, rec := range recs[1:] {
		if rec.Checksum != first.Checksum || rec.Rows != 5 || !rec.ExportedAt.Equal(first.ExportedAt) || rec.Writer != writer ||
			len(rec.Coverage) != 1 || rec.Coverage[0] != j.Coverage[0] {
			t.Fatalf("confirmation %d: %+v, want the exported state %+v with only confirmedAt newer", i+1, rec, first)
		}
		if !rec.ConfirmedAt.After(recs[i].ConfirmedAt) {
			t.Fatalf("confirmation %d: confirmedAt %s, not after %s", i+1, rec.ConfirmedAt, recs[i].ConfirmedAt)
		}
	}
	rows := 0
	for _, r := range records {
		if string(r.Key) != stateKey("east") {
			rows++
		}
	}
	if rows != 5 {
		t.Fatalf("%d row records, want the 5 upserts of the export: confirmations produce only the state record", rows)
	}
}

// TestShippedSinkPurgesTheStateOfADeletedInventory: an inventory deleted with deletionPolicy
// Delete exports an empty snapshot with PurgeState; the agent's Kafka sink then tombstones the
// state record too (docs/operations.md, deletion policy), so every key of the inventory, rows
// and state record, ends in a tombstone, the state record's with kollect-event purge.
func TestShippedSinkPurgesTheStateOfADeletedInventory(t *testing.T) {
	s, topic := shipped(t, fmt.Sprintf("retire%d", time.Now().UnixNano()), "east")
	if _, ok := s.(sink.Purger); !ok {
		t.Errorf("the agent's kafka sink (%T) is not a sink.Purger: a deletionPolicy Delete leaves its state record", s)
	}
	writer := export.Writer{Version: "v1.2.3", Instance: "kollect@east-uid"}
	w := agentWorker(t, s, 0)
	j := job("east", 4, 1, writer)
	w.Offer(j)
	accepted(t, w, j.Snapshot.Checksum)
	gone := job("east", 0, 1, writer)
	gone.PurgeState = true
	w.Offer(gone)
	accepted(t, w, gone.Snapshot.Checksum)

	last := map[string]*kgo.Record{}
	for _, r := range readTopic(t, topic) {
		last[string(r.Key)] = r
	}
	if len(last) != 5 {
		t.Fatalf("%d keys in %s, want 4 rows and the state record", len(last), topic)
	}
	for key, r := range last {
		if r.Value != nil {
			t.Errorf("key %s ends in a record with a value (kollect-event %s): %s", key, header(r, "kollect-event"), r.Value)
		}
	}
	if r := last[stateKey("east")]; r == nil || r.Value != nil || header(r, "kollect-event") != "purge" {
		desc := "no record"
		if r != nil {
			desc = fmt.Sprintf("kollect-event %q, value %s", header(r, "kollect-event"), r.Value)
		}
		t.Fatalf("the state record does not end in the purge's tombstone: %s", desc)
	}
}

// TestShippedSinkRefusesASecondWriter: agent A exports and, its data quiet, confirms; agent B
// (another instance) with the same cluster name exports a full batch longer than a conflict
// window after A's export. B is refused with the writer conflict, as PostgreSQL and S3 refuse
// it: no row record of B reaches the broker (every record produced meanwhile, by the end
// offsets, is a state record naming A as its writer), and A keeps exporting.
func TestShippedSinkRefusesASecondWriter(t *testing.T) {
	const every = time.Second
	prefix := fmt.Sprintf("writers%d", time.Now().UnixNano())
	sa, topic := shipped(t, prefix, "east")
	a := export.Writer{Version: "v1.2.3", Instance: "kollect@east-a"}
	b := export.Writer{Version: "v1.2.3", Instance: "kollect@east-b"}
	wa := agentWorker(t, sa, every)
	ja := job("east", 6, 1, a)
	wa.Offer(ja)
	accepted(t, wa, ja.Snapshot.Checksum)
	time.Sleep(sink.ConflictWindow(every) + 2*every) // A's export is older than a window: only its confirmations keep it

	before := endOffsets(t, topic)
	sb, _ := shipped(t, prefix, "east")
	snap := export.NewSnapshot(sinktest.Deployments("east", inventory, 3, 9))
	batch := &sink.Batch{Envelope: export.Envelope{SchemaVersion: export.SchemaVersion, Cluster: "east", Inventory: inventory, Generation: 1,
		ExportedAt: time.Now().UTC(), ItemCount: 3, Checksum: snap.Checksum, Rows: snap.Rows, Writer: b,
		Coverage: []export.Coverage{sinktest.Complete("deployments", 3)}},
		Diff: export.Compute(nil, snap), ConflictWindow: sink.ConflictWindow(every)}
	err := sb.Export(t.Context(), batch)
	var conflict *sink.WriterConflictError
	if !errors.As(err, &conflict) || conflict.Holder.Instance != a.Instance || sink.ClassOf(err) != sink.Terminal {
		t.Fatalf("agent B's export to A's cluster: %v, want a terminal writer conflict naming %s", err, a.Instance)
	}
	after := endOffsets(t, topic)
	for _, r := range readTopic(t, topic) {
		if r.Offset < before[r.Partition] || r.Offset >= after[r.Partition] {
			continue
		}
		if string(r.Key) != stateKey("east") {
			t.Errorf("record %s@%d/%d produced while B was refused: only state records may be (A's confirmations, B's contender mark)",
				r.Key, r.Partition, r.Offset)
			continue
		}
		var rec export.StateRecord
		if err := json.Unmarshal(r.Value, &rec); err != nil || rec.Writer != a || rec.Checksum != ja.Snapshot.Checksum {
			t.Errorf("state record @%d/%d produced while B was refused: %s (%v), want A's state", r.Partition, r.Offset, r.Value, err)
		}
	}
	if t.Failed() {
		t.Fatalf("end offsets %v → %v", before, after)
	}

	// A keeps exporting, and hears of B.
	changed := job("east", 6, 2, a)
	wa.Offer(changed)
	st := accepted(t, wa, changed.Snapshot.Checksum)
	if st.LastError != "" || st.Conflict != nil && st.Conflict.Refused {
		t.Fatalf("A after B's refusal: %+v", st)
	}
	recs := states(t, readTopic(t, topic), "east")
	if last := recs[len(recs)-1]; last.Writer != a || last.Checksum != changed.Snapshot.Checksum || last.Contender.Instance != b.Instance {
		t.Fatalf("the latest state record is %+v, want A's new snapshot with B as contender", last)
	}
}
