package delivery

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
)

// contestedSink answers exports and confirmations with what the test sets, recording the
// windows it was given.
type contestedSink struct {
	sinktest.Recorder
	mu                 sync.Mutex
	exportErr, confErr error
	exports, confirms  int
	windows            []time.Duration
}

func (c *contestedSink) Export(_ context.Context, b *sink.Batch) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.exports++
	c.windows = append(c.windows, b.ConflictWindow)
	return c.exportErr
}

func (c *contestedSink) Confirm(_ context.Context, cf sink.Confirmation) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.confirms++
	c.windows = append(c.windows, cf.ConflictWindow)
	return c.confErr
}

func (c *contestedSink) set(exportErr, confErr error) {
	c.mu.Lock()
	c.exportErr, c.confErr = exportErr, confErr
	c.mu.Unlock()
}

func (c *contestedSink) counts() (exports, confirms int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exports, c.confirms
}

var (
	holder    = export.Writer{Version: "v1.0.0", Instance: "kollect@aaaa"}
	contender = export.Writer{Version: "v1.1.0", Instance: "kollect@bbbb"}
)

// TestRefusedExportWaitsAConfirmInterval: a sink that refuses the export (another agent holds
// it) is asked again once a confirm interval, not in a tight backoff; the worker keeps the
// checksum it had, reports the conflict in its status and the gauge, and passes the window
// (two intervals) to the sink. Once the sink accepts, the conflict clears.
func TestRefusedExportWaitsAConfirmInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		s := &contestedSink{}
		refusal := &sink.WriterConflictError{Cluster: "c1", Inventory: "ns/inv", Holder: holder, HolderLastWrite: time.Now(),
			Self: contender, Window: 20 * time.Second}
		s.set(refusal, nil)
		reg := prometheus.NewRegistry()
		m := NewMetrics(reg)
		w := NewWorker(WorkerOptions{Name: "database/ns/db", Inventory: "ns/inv", Sink: s, Log: logr.Discard(), Metrics: m,
			ConfirmInterval: 10 * time.Second, Accepted: "sha256:before"}) // DefaultBackoff: it probes every 5s
		gauge := m.conflict.WithLabelValues("database/ns/db", "ns/inv")
		if v := testutil.ToFloat64(gauge); v != 0 {
			t.Fatalf("the conflict gauge reads %v before any export, want a 0 series", v)
		}
		w.Offer(&Job{Snapshot: export.NewSnapshot(sinktest.Deployments("c1", "ns/inv", 3, 1)), Cluster: "c1", Inventory: "ns/inv",
			Complete: true, Writer: contender})
		go w.Run(ctx)
		synctest.Wait()
		time.Sleep(55 * time.Second)
		synctest.Wait()
		exports, _ := s.counts()
		if exports < 5 || exports > 7 {
			t.Fatalf("%d export calls in 55s of refusals with a 10s confirm interval, want 6: one per interval", exports)
		}
		st := w.Status()
		if st.Conflict == nil || !st.Conflict.Refused || st.Conflict.Other != holder || !strings.Contains(st.LastError, holder.Instance) {
			t.Fatalf("status after refusals: %+v, want a refused conflict naming %s", st, holder.Instance)
		}
		if st.Checksum != "sha256:before" || st.Class != sink.Terminal {
			t.Fatalf("status after refusals: checksum %q class %q, want the accepted checksum kept and a terminal class", st.Checksum, st.Class)
		}
		if v := testutil.ToFloat64(gauge); v != 1 {
			t.Fatalf("the conflict gauge reads %v while refused, want 1", v)
		}
		for _, win := range s.windows {
			if win != 20*time.Second {
				t.Fatalf("the sink was given conflict windows %v, want two confirm intervals (20s)", s.windows)
			}
		}

		s.set(nil, nil) // the holder went away for the window: the sink takes this agent
		time.Sleep(10 * time.Second)
		synctest.Wait()
		st = w.Status()
		if st.Conflict != nil || st.LastError != "" || st.Checksum == "sha256:before" {
			t.Fatalf("status once the sink accepts: %+v, want the conflict cleared and the new checksum", st)
		}
		if v := testutil.ToFloat64(gauge); v != 0 {
			t.Fatalf("the conflict gauge reads %v once the sink accepts, want 0", v)
		}
	})
}

// TestContendedWritesSucceedAndReport: the holder's export and confirmations that the sink
// reports contended succeed (the checksum is accepted, confirmed_at moves, nothing is retried)
// and carry the conflict; the first uncontended confirmation clears it.
func TestContendedWritesSucceedAndReport(t *testing.T) {
	s := &contestedSink{}
	contended := &sink.ContendedError{Cluster: "c1", Inventory: "ns/inv", Contender: contender, At: time.Now(), Self: holder, Window: time.Minute}
	s.set(contended, contended)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	w := NewWorker(WorkerOptions{Name: "database/ns/db", Inventory: "ns/inv", Sink: s, Log: logr.Discard(), Metrics: m,
		ConfirmInterval: 30 * time.Second})
	gauge := m.conflict.WithLabelValues("database/ns/db", "ns/inv")
	j := &Job{Snapshot: export.NewSnapshot(sinktest.Deployments("c1", "ns/inv", 3, 1)), Cluster: "c1", Inventory: "ns/inv", Complete: true, Writer: holder}
	w.Offer(j)
	ctx := context.Background()
	if w.exportOnce(ctx) {
		t.Fatal("a contended export, which the sink holds, was marked for retry")
	}
	st := w.Status()
	if st.Checksum != j.Snapshot.Checksum || st.LastError != "" || st.Failures != 0 {
		t.Fatalf("status after a contended export: %+v, want it accepted", st)
	}
	if st.Conflict == nil || st.Conflict.Refused || st.Conflict.Other != contender || !strings.Contains(st.Conflict.Message, contender.Instance) {
		t.Fatalf("conflict after a contended export: %+v, want the contender %s reported", st.Conflict, contender.Instance)
	}
	if v := testutil.ToFloat64(gauge); v != 1 {
		t.Fatalf("the conflict gauge reads %v after a contended export, want 1", v)
	}
	before := st.LastConfirm
	time.Sleep(10 * time.Millisecond)
	w.confirmOnce(ctx)
	st = w.Status()
	if !st.LastConfirm.After(before) || st.Conflict == nil {
		t.Fatalf("after a contended confirmation: %+v, want it confirmed and the conflict kept", st)
	}
	s.set(nil, nil)
	w.confirmOnce(ctx)
	if st = w.Status(); st.Conflict != nil {
		t.Fatalf("after an uncontended confirmation the conflict is still reported: %+v", st.Conflict)
	}
	if v := testutil.ToFloat64(gauge); v != 0 {
		t.Fatalf("the conflict gauge reads %v after an uncontended confirmation, want 0", v)
	}
	if _, confirms := s.counts(); confirms != 2 {
		t.Fatalf("%d confirmations reached the sink, want 2", confirms)
	}
}

// TestRefusedConfirmationKeepsTheChecksum: a confirmation the sink refuses (another agent took
// the state over) keeps the accepted checksum and reports the conflict; it does not export
// again at once, as a sink that merely lost the snapshot (ErrNotHeld) would.
func TestRefusedConfirmationKeepsTheChecksum(t *testing.T) {
	s := &contestedSink{}
	w := NewWorker(WorkerOptions{Name: "database/ns/db", Inventory: "ns/inv", Sink: s, Log: logr.Discard(), ConfirmInterval: 30 * time.Second})
	j := &Job{Snapshot: export.NewSnapshot(sinktest.Deployments("c1", "ns/inv", 3, 1)), Cluster: "c1", Inventory: "ns/inv", Complete: true, Writer: contender}
	w.Offer(j)
	ctx := context.Background()
	if w.exportOnce(ctx) {
		t.Fatal("the first export failed")
	}
	<-w.wake // Offer's
	s.set(nil, &sink.WriterConflictError{Cluster: "c1", Inventory: "ns/inv", Holder: holder, HolderLastWrite: time.Now(), Self: contender, Window: time.Minute})
	w.confirmOnce(ctx)
	st := w.Status()
	if st.Checksum != j.Snapshot.Checksum || st.Conflict == nil || !st.Conflict.Refused || !errors.Is(s.confErr, sink.ErrWriterConflict) {
		t.Fatalf("after a refused confirmation: %+v", st)
	}
	select {
	case <-w.wake:
		t.Fatal("a refused confirmation woke the worker to export again")
	default:
	}
}
