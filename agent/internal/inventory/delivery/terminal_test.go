package delivery

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
)

// callCounter is a sink whose exports and probes fail as the test sets, counting both.
type callCounter struct {
	sinktest.Recorder
	mu                  sync.Mutex
	exportErr, probeErr error
	exports, probes     int
}

func (c *callCounter) Export(context.Context, *sink.Batch) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.exports++
	return c.exportErr
}

func (c *callCounter) Probe(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.probes++
	return c.probeErr
}

func (c *callCounter) set(exportErr, probeErr error) {
	c.mu.Lock()
	c.exportErr, c.probeErr = exportErr, probeErr
	c.mu.Unlock()
}

func (c *callCounter) counts() (exports, probes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exports, c.probes
}

// startWorker runs a worker of s with the default backoff (TerminalDelay 10 min, probes every
// 5 s) until the returned stop, and offers it a snapshot.
func startWorker(ctx context.Context, s sink.Sink) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	w := NewWorker(WorkerOptions{Name: "database/ns/db", Inventory: "ns/inv", Sink: s, Log: logr.Discard()})
	w.Offer(&Job{Snapshot: export.NewSnapshot(sinktest.Deployments("c1", "ns/inv", 3, 1)), Cluster: "c1", Inventory: "ns/inv"})
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	return func() { cancel(); <-done }
}

// TestTerminalErrorIsNotRetriedAtEachPassingProbe: the export fails with a terminal error (the
// database refuses it) while the connection test passes. The worker tries again after
// TerminalDelay, or at once when the configuration changes (a new worker), and never in
// between: a passing probe used to end the wait, a retry every 5 s. The window is closed on
// both sides by a retry that does happen.
func TestTerminalErrorIsNotRetriedAtEachPassingProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &callCounter{}
		s.set(sink.Terminalf(`ERROR: permission denied for table rows (SQLSTATE 42501)`), nil)
		stop := startWorker(t.Context(), s)
		synctest.Wait()
		if exports, _ := s.counts(); exports != 1 {
			t.Fatalf("%d exports at the start, want 1", exports)
		}
		time.Sleep(DefaultBackoff.TerminalDelay - time.Second)
		synctest.Wait()
		exports, probes := s.counts()
		if exports != 1 {
			t.Fatalf("%d exports in the %s after a terminal error, while the probe passed %d times; want none but the first until TerminalDelay",
				exports, DefaultBackoff.TerminalDelay-time.Second, probes)
		}
		if probes == 0 {
			t.Fatal("the sink was never probed: the window did not test a passing probe")
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if exports, _ := s.counts(); exports != 2 {
			t.Fatalf("%d exports once TerminalDelay passed, want the retry (2)", exports)
		}

		// A configuration change builds a new worker, which tries at once.
		time.Sleep(time.Minute)
		synctest.Wait()
		stop()
		if exports, _ := s.counts(); exports != 2 {
			t.Fatalf("%d exports a minute after the retry, want still 2", exports)
		}
		stop = startWorker(t.Context(), s)
		defer stop()
		synctest.Wait()
		if exports, _ := s.counts(); exports != 3 {
			t.Fatalf("%d exports after the configuration changed, want a try at once (3)", exports)
		}
	})
}

// TestTerminalConnectionErrorIsRetriedWhenTheProbePasses: when what failed is what the probe
// checks (the credentials: the probe fails too), the probe passing again means it was fixed, and
// the export is retried within a probe interval, not after TerminalDelay.
func TestTerminalConnectionErrorIsRetriedWhenTheProbePasses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &callCounter{}
		refused := sink.Terminalf(`FATAL: password authentication failed for user "kollect_agent" (SQLSTATE 28P01)`)
		s.set(refused, refused)
		defer startWorker(t.Context(), s)()
		synctest.Wait()
		time.Sleep(time.Minute)
		synctest.Wait()
		if exports, probes := s.counts(); exports != 1 || probes < 10 {
			t.Fatalf("a minute of bad credentials: %d exports, %d probes; want 1 export and a probe every 5 s", exports, probes)
		}
		s.set(nil, nil) // the password was fixed outside Kubernetes
		time.Sleep(DefaultBackoff.ProbeInterval)
		synctest.Wait()
		if exports, _ := s.counts(); exports != 2 {
			t.Fatalf("%d exports a probe interval after the credentials were fixed, want the retry (2)", exports)
		}
	})
}
