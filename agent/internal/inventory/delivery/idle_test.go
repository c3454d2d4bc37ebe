package delivery

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
)

// writeCounter is a sink that counts what it is asked to write: rows (an export's upserts and
// deletes) and state writes (an export's state, and each confirmation).
type writeCounter struct {
	sinktest.Recorder
	exports, rowWrites, confirms atomic.Int64
}

func (c *writeCounter) Export(_ context.Context, b *sink.Batch) error {
	c.exports.Add(1)
	c.rowWrites.Add(int64(len(b.Diff.Added) + len(b.Diff.Changed) + len(b.Diff.Deleted)))
	return nil
}

func (c *writeCounter) Confirm(context.Context, sink.Confirmation) error {
	c.confirms.Add(1)
	return nil
}

// TestStaticHourWritesOnlyConfirmations: ten inventories with unchanging data and the default
// confirmInterval (5 m), over an hour of (virtual) time: after each one's first export, a sink
// is written to only by confirmations, at most 12 state writes per inventory, and no row.
func TestStaticHourWritesOnlyConfirmations(t *testing.T) {
	const inventories, rows = 10, 100
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		sinks := make([]*writeCounter, inventories)
		for i := range sinks {
			sinks[i] = &writeCounter{}
			inv := fmt.Sprintf("ns/inv-%d", i)
			w := NewWorker(WorkerOptions{Name: "database/ns/db", Inventory: inv, Sink: sinks[i], Log: logr.Discard(),
				ConfirmInterval: 5 * time.Minute})
			w.Offer(&Job{Snapshot: export.NewSnapshot(sinktest.Deployments("c1", inv, rows, 1)), Cluster: "c1", Inventory: inv, Complete: true})
			go w.Run(ctx)
		}
		synctest.Wait()
		for i, s := range sinks {
			if s.exports.Load() != 1 || s.rowWrites.Load() != rows {
				t.Fatalf("inventory %d: first export: %d exports, %d row writes; want 1 and %d", i, s.exports.Load(), s.rowWrites.Load(), rows)
			}
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		cancel()
		for i, s := range sinks {
			exports, rowWrites, confirms := s.exports.Load()-1, s.rowWrites.Load()-rows, s.confirms.Load()
			if exports != 0 || rowWrites != 0 || confirms < 11 || confirms > 12 {
				t.Errorf("inventory %d over a static hour: %d exports, %d row writes, %d confirmations; want 0, 0 and 11-12",
					i, exports, rowWrites, confirms)
			}
			if i == 0 {
				t.Logf("a static hour, per inventory and sink: %d state writes (confirmations), %d row writes", confirms, rowWrites)
			}
		}
	})
}

// BenchmarkConfirm measures one confirmation of a sink holding snapshots of 100 and 100,000
// rows: the confirmation handles a checksum, never the rows, so both cost the same.
func BenchmarkConfirm(b *testing.B) {
	for _, rows := range []int{100, 100_000} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			s := &writeCounter{}
			w := NewWorker(WorkerOptions{Name: "database/ns/db", Inventory: "ns/inv", Sink: s, Log: logr.Discard(),
				ConfirmInterval: 5 * time.Minute})
			snap := export.NewSnapshot(sinktest.Deployments("c1", "ns/inv", rows, 1))
			w.Offer(&Job{Snapshot: snap, Cluster: "c1", Inventory: "ns/inv", Complete: true})
			if w.exportOnce(b.Context()) {
				b.Fatal("the first export failed")
			}
			b.ReportAllocs()
			for b.Loop() {
				w.confirmOnce(b.Context())
			}
			if s.confirms.Load() == 0 {
				b.Fatal("no confirmation reached the sink")
			}
		})
	}
}
