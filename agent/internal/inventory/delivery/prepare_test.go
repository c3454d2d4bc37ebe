package delivery

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
)

// preparingSink records when Prepare was called against the exports.
type preparingSink struct {
	*sinktest.Recorder
	err error

	mu       sync.Mutex
	prepared int
	exported int // exports made before the first Prepare returned
}

func (p *preparingSink) Prepare(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.prepared++
	p.exported = len(p.Batches())
	return p.err
}

// TestSinkIsPreparedBeforeTheFirstExport: a worker prepares its sink once, when it starts and
// before it exports, and a failed preparation leaves the export to set the sink up.
func TestSinkIsPreparedBeforeTheFirstExport(t *testing.T) {
	for _, prepErr := range []error{nil, sink.TransientError(errors.New("connection refused"))} {
		s := &preparingSink{Recorder: sinktest.NewRecorder(), err: prepErr}
		w := newTestWorker(s, Backoff{Base: time.Millisecond, Max: time.Millisecond, TerminalDelay: time.Hour, BreakerThreshold: 10, BreakerCooldown: time.Hour}, time.Second)
		w.Offer(job(1)) // offered before the worker runs: it still waits for the preparation
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); w.Run(ctx) }()
		if !s.WaitFor(5*time.Second, func(b []*sink.Batch) bool { return len(b) == 1 }) {
			t.Fatalf("prepare error %v: the offered snapshot was not exported", prepErr)
		}
		w.Offer(job(2))
		if !s.WaitFor(5*time.Second, func(b []*sink.Batch) bool { return len(b) == 2 }) {
			t.Fatalf("prepare error %v: the second snapshot was not exported", prepErr)
		}
		cancel()
		<-done
		s.mu.Lock()
		if s.prepared != 1 || s.exported != 0 {
			t.Errorf("prepare error %v: prepared %d times, the first time after %d exports; want once, before any", prepErr, s.prepared, s.exported)
		}
		s.mu.Unlock()
	}
}
