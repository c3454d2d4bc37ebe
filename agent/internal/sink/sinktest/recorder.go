package sinktest

import (
	"context"
	"sync"
	"time"

	"kollect.dev/agent/internal/sink"
)

// Recorder is an in-memory sink.Sink. It is a sink.Purger too: it keeps a state record per
// (cluster, inventory) it was exported to, as the shared sinks do, which Purge removes.
type Recorder struct {
	mu      sync.Mutex
	batches []*sink.Batch
	fail    error
	hang    bool
	changed chan struct{}
	// states maps cluster/inventory to the last batch exported to it, until purged.
	states map[string]*sink.Batch
	purges []string
}

var _ sink.Purger = (*Recorder)(nil)

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
	if r.states == nil {
		r.states = map[string]*sink.Batch{}
	}
	r.states[b.Envelope.Cluster+"/"+b.Envelope.Inventory] = b
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

// Holdings reports the state records the recorder keeps of the cluster.
func (r *Recorder) Holdings(_ context.Context, cluster, inventory string) ([]sink.Holding, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return nil, r.fail
	}
	return r.heldLocked(cluster, inventory), nil
}

func (r *Recorder) heldLocked(cluster, inventory string) []sink.Holding {
	set := sink.HoldingSet{}
	for _, b := range r.states {
		env := &b.Envelope
		if env.Cluster != cluster || (inventory != "" && env.Inventory != inventory) {
			continue
		}
		*set.Of(env.Inventory) = sink.Holding{Inventory: env.Inventory, Rows: len(env.Rows), CoverageEntries: len(env.Coverage),
			StateRecords: 1, ChangedAt: env.ExportedAt, ConfirmedAt: env.ExportedAt, Writer: env.Writer}
	}
	return set.List()
}

// Purge removes the state records of the cluster (of inventory unless ""), or fails like
// Export; cutoff is checked like the shared sinks check it.
func (r *Recorder) Purge(_ context.Context, cluster, inventory string, cutoff time.Time) ([]sink.Holding, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return nil, r.fail
	}
	held := r.heldLocked(cluster, inventory)
	if late := sink.NotRetired(held, cutoff); len(late) > 0 {
		return nil, sink.NotRetiredError(cluster, late, cutoff)
	}
	for _, h := range held {
		delete(r.states, cluster+"/"+h.Inventory)
	}
	r.purges = append(r.purges, cluster+"/"+inventory)
	return held, nil
}

// Purges lists the purges made, as cluster/inventory ("cluster/" for a whole cluster).
func (r *Recorder) Purges() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.purges...)
}

// Holds reports whether the recorder keeps a state record of the cluster's inventory.
func (r *Recorder) Holds(cluster, inventory string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.states[cluster+"/"+inventory]
	return ok
}
