package sinktest

import (
	"context"
	"sync"
	"time"

	"kollect.dev/agent/internal/sink"
)

// Recorder is an in-memory sink.Sink.
type Recorder struct {
	mu      sync.Mutex
	batches []*sink.Batch
	fail    error
	hang    bool
	changed chan struct{}
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder { return &Recorder{changed: make(chan struct{}, 1)} }

// Export records the batch, or fails, or blocks until ctx ends.
func (r *Recorder) Export(ctx context.Context, b *sink.Batch) error {
	r.mu.Lock()
	fail, hang := r.fail, r.hang
	r.mu.Unlock()
	if hang {
		<-ctx.Done()
		return ctx.Err()
	}
	if fail != nil {
		return fail
	}
	r.mu.Lock()
	r.batches = append(r.batches, b)
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
	return nil
}

// Probe fails like Export.
func (r *Recorder) Probe(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fail
}

// Preview describes a recorder.
func (r *Recorder) Preview(_ context.Context, cluster, inventory string) (sink.Preview, error) {
	return sink.Preview{Destination: "memory://" + cluster + "/" + inventory}, nil
}

// Close does nothing.
func (r *Recorder) Close() error { return nil }

// FailWith makes every following call fail with err (nil to recover).
func (r *Recorder) FailWith(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail = err
}

// Hang makes exports block until their deadline.
func (r *Recorder) Hang(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hang = on
}

// Batches returns the recorded batches.
func (r *Recorder) Batches() []*sink.Batch {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*sink.Batch(nil), r.batches...)
}

// Last returns the last recorded batch, or nil.
func (r *Recorder) Last() *sink.Batch {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.batches) == 0 {
		return nil
	}
	return r.batches[len(r.batches)-1]
}

// WaitFor waits until cond holds for the recorded batches or the timeout passes.
func (r *Recorder) WaitFor(timeout time.Duration, cond func([]*sink.Batch) bool) bool {
	deadline := time.After(timeout)
	for {
		if cond(r.Batches()) {
			return true
		}
		select {
		case <-r.changed:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			return cond(r.Batches())
		}
	}
}
