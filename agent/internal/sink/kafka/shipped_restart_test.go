package kafka_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/inventory/delivery"
	"kollect.dev/agent/internal/sink/sinktest"
)

// An agent restart, as the shipped agent has it: a new process builds a new sink, and a new
// delivery worker that knows from the inventory's status only the checksum the sink accepted
// last. Its first batch for the sink has no baseline (a full diff): the first periodic resync
// when the data did not change, the first export when it did.

// process is one agent process's delivery worker on a sink of the sink table.
type process struct {
	w    *delivery.Worker
	stop func()
}

// start runs a worker on a new sink of cluster east in topic prefix.{east}.events, as a
// process that starts with status naming the snapshot last accepted (nil: none).
func start(t *testing.T, prefix string, last *delivery.Job) *process {
	t.Helper()
	s, _ := shipped(t, prefix, "east")
	o := delivery.WorkerOptions{Name: "event/kollect/events", SinkType: "event/kafka", Inventory: inventory, Sink: s,
		Timeout: 20 * time.Second, Metrics: delivery.NewMetrics(prometheus.NewRegistry()), Log: testr.New(t)}
	if last != nil {
		o.Accepted, o.AcceptedRows, o.AcceptedCoverage = last.Snapshot.Checksum, last.Snapshot.Len(), last.CoverageDigest
	}
	w := delivery.NewWorker(o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	p := &process{w: w, stop: func() { cancel(); <-done }}
	t.Cleanup(p.stop)
	return p
}

// exported waits until the worker's first call of the sink returned, and fails on its error.
func exported(t *testing.T, w *delivery.Worker) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if st := w.Status(); !st.LastAttempt.IsZero() {
			if st.LastError != "" {
				t.Fatalf("the restarted sink's export failed: %s", st.LastError)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the restarted worker never called the sink")
		}
	}
}

// jobOf is a complete snapshot of rows written by the agent east-uid.
func jobOf(rows []export.Row) *delivery.Job {
	cov := []export.Coverage{sinktest.Complete("deployments", int64(len(rows)))}
	return &delivery.Job{Snapshot: export.NewSnapshot(rows), Cluster: "east", Inventory: inventory,
		Writer: export.Writer{Version: "v1.2.3", Instance: "kollect@east-uid"}, Complete: true, Coverage: cov,
		CoverageDigest: export.CoverageDigest(cov)}
}

// whileDown changes five of the 40 rows of sinktest.Deployments (in their order of
// deployment numbers) and deletes two, as an agent that is down misses it; it returns the new
// rows, the changed rows and the deleted ones, the last two in canonical order.
func whileDown(rows []export.Row) (next, changed, deleted []export.Row) {
	for i := range rows {
		switch {
		case i%8 == 3:
			r := sinktest.Deployment("east", inventory, i, map[string]any{"replicas": 42, "image": "registry.example/app:2"})
			next, changed = append(next, r), append(changed, r)
		case i == 12 || i == 33:
			deleted = append(deleted, rows[i])
		default:
			next = append(next, rows[i])
		}
	}
	order := func(a, b export.Row) int { return export.Compare(&a, &b) }
	slices.SortFunc(changed, order)
	slices.SortFunc(deleted, order)
	return next, changed, deleted
}

// TestShippedSinkRestartSendsOnlyTheChanges, against kfake (a stand-in for Kafka): the agent
// exports 40 rows and stops. A restarted agent with unchanged data produces nothing at its
// first periodic resync: the topic's end offsets (the broker's high watermarks) are the same
// before it started and after the sink returned from that resync. Five rows change and two
// are deleted while the next restart is down: that restart produces exactly those seven
// events, each delete followed by its tombstone, then the state record, in that order in
// each partition, without the resync mark, and nothing else; a restart after it, with
// unchanged data, nothing again.
func TestShippedSinkRestartSendsOnlyTheChanges(t *testing.T) {
	prefix := fmt.Sprintf("restart%d", time.Now().UnixNano())
	_, topic := shipped(t, prefix, "east")
	first := start(t, prefix, nil)
	rows1 := sinktest.Deployments("east", inventory, 40, 1)
	j1 := jobOf(slices.Clone(rows1)) // a snapshot sorts its rows
	first.w.Offer(j1)
	accepted(t, first.w, j1.Snapshot.Checksum)
	first.stop()

	unchangedRestart := func(last *delivery.Job) {
		t.Helper()
		before := endOffsets(t, topic)
		p := start(t, prefix, last)
		resync := jobOf(last.Snapshot.Rows)
		resync.Resync = true
		p.w.Offer(resync)
		exported(t, p.w)
		if after := endOffsets(t, topic); !maps.Equal(after, before) {
			t.Fatalf("a restart with unchanged data produced records: end offsets %v → %v", before, after)
		}
		t.Logf("restart with unchanged data (%d rows): end offsets %v before and after its first resync: 0 records", last.Snapshot.Len(), before)
		p.stop()
	}
	unchangedRestart(j1)

	rows2, changed, deleted := whileDown(rows1)
	before := endOffsets(t, topic)
	p := start(t, prefix, j1)
	j2 := jobOf(rows2)
	p.w.Offer(j2)
	accepted(t, p.w, j2.Snapshot.Checksum)
	p.stop()

	// The records of the restart, in produce order as each partition keeps it.
	type rec struct{ key, event, row string }
	want := []rec{}
	for _, r := range changed {
		want = append(want, rec{r.Key().String(), "upsert", string(r.CanonicalJSON())})
	}
	for _, r := range deleted {
		want = append(want, rec{r.Key().String(), "delete", string(r.CanonicalJSON())}, rec{r.Key().String(), "tombstone", ""})
	}
	want = append(want, rec{stateKey("east"), "state", ""})
	partitionOf := map[string]int32{}
	got := map[int32][]rec{}
	added := 0
	for _, r := range readTopic(t, topic) {
		partitionOf[string(r.Key)] = r.Partition
		if r.Offset < before[r.Partition] {
			continue
		}
		added++
		if header(r, "kollect-resync") != "" {
			t.Errorf("record %s@%d/%d carries the resync mark: a restart sends changes, not a resync", r.Key, r.Partition, r.Offset)
		}
		x := rec{key: string(r.Key), event: header(r, "kollect-event")}
		switch {
		case r.Value == nil:
			x.event = "tombstone"
		case x.event == "upsert" || x.event == "delete":
			var ev export.ChangeEvent
			if err := json.Unmarshal(r.Value, &ev); err != nil || ev.Row == nil {
				t.Fatalf("record %s@%d/%d: %v: %s", r.Key, r.Partition, r.Offset, err, r.Value)
			}
			x.row = string(ev.Row.CanonicalJSON())
		}
		got[r.Partition] = append(got[r.Partition], x)
	}
	if added != len(want) {
		t.Errorf("the restart after 5 changes and 2 deletes produced %d records, want %d (7 events, 2 tombstones, the state): %v", added, len(want), got)
	}
	for p, recs := range got {
		var inP []rec
		for _, w := range want {
			if partitionOf[w.key] == p {
				inP = append(inP, w)
			}
		}
		if !slices.Equal(recs, inP) {
			t.Errorf("partition %d after the restart:\n got %v\nwant %v", p, recs, inP)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("restart after 5 changes and 2 deletes: %d records (5 upserts, 2 deletes and their tombstones, the state record)", added)
	unchangedRestart(j2)
}
