package agent

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// Negatives need evidence (docs/testing.md): "nothing was exported" is asserted over a window
// bounded by two events the test observed, never over a sleep. The closing event used here is
// a resync the test asks for with kollect.dev/resync-now: the request goes through the
// inventory's debounce loop like any change, so once the sink has been called for it,
// everything signalled to the loop before the request has been built and offered to the sink,
// and any export that it caused has been made (or has been folded into the resync, which then
// carries a checksum other than the one the sink held).

var resyncSeq atomic.Int64

// resyncNow asks the agent for a resync of the inventory key with a value not used before.
func resyncNow(t *testing.T, key client.ObjectKey) {
	t.Helper()
	ctx := context.Background()
	inv := &kollectv1.KollectInventory{}
	if err := cp.Client.Get(ctx, key, inv); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(inv.DeepCopy())
	ann := inv.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[kollectv1.AnnotationResyncNow] = fmt.Sprintf("quiet-%d-%d", time.Now().UnixNano(), resyncSeq.Add(1))
	inv.SetAnnotations(ann)
	if err := cp.Client.Patch(ctx, inv, patch); err != nil {
		t.Fatal(err)
	}
}

// awaitResync asks for a resync of the inventory key and waits until resyncs() exceeds what it
// returned at the request: the agent has called the sink for it (the call has returned).
func awaitResync(t *testing.T, key client.ObjectKey, resyncs func() int) {
	t.Helper()
	before := resyncs()
	resyncNow(t, key)
	eventually(t, 30*time.Second, "the sink called for the resync asked with kollect.dev/resync-now", func() (bool, string) {
		n := resyncs()
		return n > before, fmt.Sprintf("%d resync calls, %d before the request", n, before)
	})
}

// resyncBatches counts the recorder's resync batches.
func resyncBatches(rec *sinktest.Recorder) func() int {
	return func() int {
		n := 0
		for _, b := range rec.Batches() {
			if b.Resync {
				n++
			}
		}
		return n
	}
}

// contentExports returns the batches that exported content the sink did not hold: every
// batch but a resync of the checksum it already had.
func contentExports(batches []*sink.Batch) []*sink.Batch {
	var out []*sink.Batch
	for _, b := range batches {
		if !b.Resync || b.Envelope.Checksum != b.PreviousChecksum {
			out = append(out, b)
		}
	}
	return out
}

func describeBatches(batches []*sink.Batch) string {
	var parts []string
	for _, b := range batches {
		parts = append(parts, fmt.Sprintf("{resync=%v rows=%d checksum=%.8s previous=%.8s}", b.Resync, len(b.Envelope.Rows),
			b.Envelope.Checksum, b.PreviousChecksum))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// assertRecorderQuiet proves that the recorder received nothing from batch from on: it closes
// the window with a requested resync and asserts that the window holds that resync alone, of
// the checksum want the sink held (an export folded into it would carry another). It returns
// the batch count after the resync.
func assertRecorderQuiet(t *testing.T, rec *sinktest.Recorder, key client.ObjectKey, from int, want, what string) int {
	t.Helper()
	awaitResync(t, key, resyncBatches(rec))
	all := rec.Batches()
	since := all[from:]
	if bad := contentExports(since); len(bad) > 0 {
		t.Fatalf("%s: %d export(s) of new content before the requested resync was called: %s", what, len(bad), describeBatches(since))
	}
	if len(since) != 1 || since[0].Envelope.Checksum != want {
		t.Fatalf("%s: want the requested resync alone, of the unchanged checksum %.8s: %s", what, want, describeBatches(since))
	}
	return len(all)
}

// callCounter wraps sink factories so that every sink they build counts its Export calls, by
// kind of call, once each call has returned: the in-process view of the agent's
// kollect_export_duration_seconds_count, for sinks whose own writes the test reads elsewhere.
type callCounter struct {
	mu             sync.Mutex
	calls, resyncs int
}

func (c *callCounter) wrap(f sink.Factories) sink.Factories {
	out := sink.Factories{}
	for k, factory := range f {
		out[k] = func(ctx context.Context, obj client.Object, env sink.Env) (sink.Sink, error) {
			s, err := factory(ctx, obj, env)
			if err != nil {
				return nil, err
			}
			return &countedSink{Sink: s, c: c}, nil
		}
	}
	return out
}

// Resyncs is the number of resync calls that have returned.
func (c *callCounter) Resyncs() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.resyncs
}

// Calls is the number of export calls that have returned.
func (c *callCounter) Calls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

type countedSink struct {
	sink.Sink
	c *callCounter
}

func (s *countedSink) Export(ctx context.Context, b *sink.Batch) error {
	err := s.Sink.Export(ctx, b)
	s.c.mu.Lock()
	s.c.calls++
	if b.Resync {
		s.c.resyncs++
	}
	s.c.mu.Unlock()
	return err
}
