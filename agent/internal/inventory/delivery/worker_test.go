package delivery

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
)

func job(version int) *Job {
	return &Job{Snapshot: export.NewSnapshot(sinktest.Deployments("c1", "ns/inv", 3, version)), Cluster: "c1", Inventory: "ns/inv"}
}

func newTestWorker(s sink.Sink, b Backoff, timeout time.Duration) *Worker {
	return NewWorker(WorkerOptions{Name: "snapshot/ns/rec", Sink: s, Backoff: b, Timeout: timeout, Log: logr.Discard()})
}

// TestRetryDelayIsExponentialWithFullJitter: after n transient failures a retry waits a
// uniformly drawn time in (0, min(Base·2ⁿ⁻¹, Max)]: never more, and spread over the whole
// range (full jitter, so that agents that failed together do not retry together).
func TestRetryDelayIsExponentialWithFullJitter(t *testing.T) {
	b := Backoff{Base: 100 * time.Millisecond, Max: 3 * time.Second, TerminalDelay: time.Hour, BreakerThreshold: 1000, BreakerCooldown: time.Hour}
	w := newTestWorker(sinktest.NewRecorder(), b, time.Second)
	for _, c := range []struct {
		failures int
		bound    time.Duration
	}{{1, 100 * time.Millisecond}, {2, 200 * time.Millisecond}, {4, 800 * time.Millisecond}, {6, 3 * time.Second}, {64, 3 * time.Second}} {
		w.status = Status{Failures: c.failures, Class: sink.Transient}
		lo, hi := c.bound, time.Duration(0)
		for range 2000 {
			d := w.retryDelay()
			if d <= 0 || d > c.bound {
				t.Fatalf("%d failures: delay %s outside (0, %s]", c.failures, d, c.bound)
			}
			lo, hi = min(lo, d), max(hi, d)
		}
		if lo > c.bound/10 || hi < c.bound*9/10 {
			t.Errorf("%d failures: 2000 delays spread only over [%s, %s] of (0, %s]: not full jitter", c.failures, lo, hi, c.bound)
		}
	}
}

// TestBreakerOpensAfterThresholdAndClosesOnSuccess drives the worker's attempts one by one
// against the test sink's fail switch.
func TestBreakerOpensAfterThresholdAndClosesOnSuccess(t *testing.T) {
	rec := sinktest.NewRecorder()
	b := Backoff{Base: time.Millisecond, Max: 4 * time.Millisecond, TerminalDelay: time.Hour, BreakerThreshold: 3, BreakerCooldown: time.Hour}
	w := newTestWorker(rec, b, time.Second)
	w.Offer(job(1))
	rec.FailWith(sink.TransientError(errors.New("connection refused")))
	ctx := context.Background()
	for i := 1; i <= 3; i++ {
		if !w.exportOnce(ctx) {
			t.Fatalf("attempt %d: a failed export was not retried", i)
		}
		st := w.Status()
		if st.Failures != i || st.LastAttempt.IsZero() || !strings.Contains(st.LastError, "connection refused") {
			t.Fatalf("attempt %d: status %+v", i, st)
		}
		d := w.retryDelay()
		if i < b.BreakerThreshold {
			if st.Class != sink.Transient || d > b.Max {
				t.Fatalf("attempt %d: class %s, delay %s; want transient, at most %s before the breaker opens", i, st.Class, d, b.Max)
			}
		} else if st.Class != sink.CircuitOpen || d < b.BreakerCooldown {
			t.Fatalf("attempt %d: class %s, delay %s; want the breaker open (circuitOpen) and at least its cooldown %s", i, st.Class, d, b.BreakerCooldown)
		}
	}
	rec.FailWith(nil)
	if w.exportOnce(ctx) {
		t.Fatal("a successful export asked for a retry")
	}
	st := w.Status()
	if st.Failures != 0 || st.Class != "" || st.LastError != "" || st.Checksum != job(1).Snapshot.Checksum {
		t.Fatalf("after recovery: %+v, want the breaker closed and the checksum accepted", st)
	}
	if len(rec.Batches()) != 1 {
		t.Fatalf("%d batches recorded, want the one that succeeded", len(rec.Batches()))
	}
}

// TestTerminalErrorWaitsTerminalDelay: retrying a terminal error cannot help, so the next
// attempt waits TerminalDelay (or a configuration change, which builds a new worker), whatever
// the backoff would say; and terminal errors never count as an open breaker.
func TestTerminalErrorWaitsTerminalDelay(t *testing.T) {
	rec := sinktest.NewRecorder()
	b := Backoff{Base: time.Millisecond, Max: time.Millisecond, TerminalDelay: 10 * time.Minute, BreakerThreshold: 1, BreakerCooldown: time.Minute}
	w := newTestWorker(rec, b, time.Second)
	w.Offer(job(1))
	rec.FailWith(sink.Terminalf("bucket does not exist"))
	if !w.exportOnce(context.Background()) {
		t.Fatal("a terminal failure was not marked for retry")
	}
	if st := w.Status(); st.Class != sink.Terminal {
		t.Fatalf("class %s, want terminal", st.Class)
	}
	if d := w.retryDelay(); d != b.TerminalDelay {
		t.Fatalf("retry after a terminal error in %s, want TerminalDelay %s", d, b.TerminalDelay)
	}
}

// TestDeadlineEndsAHangingExport: a sink that never answers is cut off at the worker's per-call
// deadline and reported as such.
func TestDeadlineEndsAHangingExport(t *testing.T) {
	rec := sinktest.NewRecorder()
	rec.Hang(true)
	w := newTestWorker(rec, DefaultBackoff, 50*time.Millisecond)
	w.Offer(job(1))
	if !w.exportOnce(context.Background()) {
		t.Fatal("a timed-out export was not retried")
	}
	st := w.Status()
	if !strings.Contains(st.LastError, "did not finish within 50ms") || st.Class != sink.Transient {
		t.Fatalf("status %+v, want a transient 'did not finish within 50ms'", st)
	}
}

// TestHangingSinkDoesNotDelayAnother: two sinks of one inventory have a worker each; while one
// hangs, the other exports every snapshot it is offered.
func TestHangingSinkDoesNotDelayAnother(t *testing.T) {
	hanging, healthy := sinktest.NewRecorder(), sinktest.NewRecorder()
	hanging.Hang(true)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	var workers []*Worker
	for _, s := range []*sinktest.Recorder{hanging, healthy} {
		w := newTestWorker(s, DefaultBackoff, time.Hour)
		workers = append(workers, w)
		wg.Go(func() { w.Run(ctx) })
	}
	for v := 1; v <= 3; v++ {
		j := job(v)
		for _, w := range workers {
			w.Offer(&Job{Snapshot: j.Snapshot, Cluster: j.Cluster, Inventory: j.Inventory})
		}
		if !healthy.WaitFor(30*time.Second, func(b []*sink.Batch) bool {
			return len(b) > 0 && b[len(b)-1].Envelope.Checksum == j.Snapshot.Checksum
		}) {
			t.Fatalf("snapshot %d never reached the healthy sink while the other hung", v)
		}
	}
	if n := len(hanging.Batches()); n != 0 {
		t.Fatalf("the hanging sink recorded %d batches", n)
	}
}

// TestShutdownDuringAnExportIsNotAFailure: a worker stopped mid-export leaves no error behind
// (the next process resumes from status).
func TestShutdownDuringAnExportIsNotAFailure(t *testing.T) {
	rec := sinktest.NewRecorder()
	rec.Hang(true)
	w := newTestWorker(rec, DefaultBackoff, time.Hour)
	w.Offer(job(1))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan bool)
	go func() { done <- w.exportOnce(ctx) }()
	cancel()
	if <-done {
		t.Fatal("an export cut off by shutdown asked for a retry")
	}
	if st := w.Status(); st.Failures != 0 || st.LastError != "" {
		t.Fatalf("status after shutdown %+v", st)
	}
}

// TestRecoveredSinkIsCaughtUpWithoutWaitingOutTheBackoff: with the breaker open and the next
// attempt an hour away, a sink that answers its probe again gets the export at once.
func TestRecoveredSinkIsCaughtUpWithoutWaitingOutTheBackoff(t *testing.T) {
	rec := sinktest.NewRecorder()
	rec.FailWith(sink.TransientError(errors.New("connection refused")))
	b := Backoff{Base: time.Hour, Max: time.Hour, TerminalDelay: time.Hour, BreakerThreshold: 1, BreakerCooldown: time.Hour,
		ProbeInterval: 20 * time.Millisecond}
	w := newTestWorker(rec, b, time.Second)
	runUntilFailed(t, w, func(st Status) bool { return st.Failures > 0 })
	rec.FailWith(nil)
	if !rec.WaitFor(30*time.Second, func(b []*sink.Batch) bool { return len(b) == 1 }) {
		t.Fatalf("the sink recovered but the export waits out its hour of backoff: %+v", w.Status())
	}
}

// TestKickEndsTheTerminalDelay: after a terminal error the worker waits TerminalDelay (an hour
// here) and its probe cannot help (probing is off); Kick, what kollect.dev/resync-now does,
// makes the next attempt now.
func TestKickEndsTheTerminalDelay(t *testing.T) {
	rec := sinktest.NewRecorder()
	rec.FailWith(sink.Terminalf("bucket kollect does not exist"))
	b := Backoff{Base: time.Hour, Max: time.Hour, TerminalDelay: time.Hour, BreakerThreshold: 5, BreakerCooldown: time.Hour}
	w := newTestWorker(rec, b, time.Second)
	runUntilFailed(t, w, func(st Status) bool { return st.Class == sink.Terminal })
	rec.FailWith(nil) // the user created the bucket
	if rec.WaitFor(200*time.Millisecond, func(b []*sink.Batch) bool { return len(b) > 0 }) {
		t.Fatal("the worker retried a terminal error before its delay without being asked")
	}
	w.Kick()
	if !rec.WaitFor(30*time.Second, func(b []*sink.Batch) bool { return len(b) == 1 }) {
		t.Fatalf("Kick did not end the terminal delay: %+v", w.Status())
	}
}

// runUntilFailed runs w (stopped at the end of the test), offers it a job and waits until its
// status satisfies failed.
func runUntilFailed(t *testing.T, w *Worker, failed func(Status) bool) {
	t.Helper()
	seen := make(chan struct{}, 1)
	w.onStatus = func(st Status) {
		if failed(st) {
			select {
			case seen <- struct{}{}:
			default:
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Go(func() { w.Run(ctx) })
	w.Offer(job(1))
	select {
	case <-seen:
	case <-time.After(30 * time.Second):
		t.Fatal("the first attempt never failed")
	}
}

// TestPendingUntilTheSinkHoldsTheSnapshot: a worker is pending from an offer until the sink
// accepted it, and not while it waits to retry a failure (the agent's second start-up release
// waits on Pending, and must not wait on a sink that is down).
func TestPendingUntilTheSinkHoldsTheSnapshot(t *testing.T) {
	rec := sinktest.NewRecorder()
	w := newTestWorker(rec, Backoff{Base: time.Millisecond, Max: time.Millisecond, TerminalDelay: time.Hour, BreakerThreshold: 10, BreakerCooldown: time.Hour}, time.Second)
	if w.Pending() {
		t.Fatal("a worker without a job is pending")
	}
	ctx := context.Background()
	w.Offer(job(1))
	if !w.Pending() {
		t.Fatal("an offered snapshot is not pending")
	}
	rec.FailWith(sink.TransientError(errors.New("connection refused")))
	if !w.exportOnce(ctx) || w.Pending() {
		t.Fatal("a worker waiting to retry a failed export is pending")
	}
	rec.FailWith(nil)
	if w.exportOnce(ctx) || w.Pending() {
		t.Fatal("a worker whose sink holds the snapshot is pending")
	}
	w.Offer(job(1)) // the same snapshot again: nothing to do
	if w.Pending() {
		t.Fatal("a snapshot the sink holds is pending")
	}
	w.Offer(job(2))
	if !w.Pending() {
		t.Fatal("a new snapshot is not pending")
	}
}
