package sink

import (
	"context"

	"kollect.dev/agent/internal/export"
)

// Batch is one export of one inventory to one sink.
type Batch struct {
	// Envelope carries the full current snapshot.
	Envelope export.Envelope
	// Diff is relative to the snapshot the sink accepted last (PreviousChecksum).
	Diff export.Diff
	// PreviousChecksum is the checksum the sink accepted last, "" when unknown. Database sinks
	// compare it with their state table to decide between applying the diff and a full
	// reconcile.
	PreviousChecksum string
	// Resync marks a periodic full re-send requested by the inventory's resyncInterval.
	Resync bool
}

// Sink is a destination of inventory exports. The agent calls a Sink from one goroutine per
// sink, with a deadline on every call, and retries failed calls with backoff: Export must be
// idempotent for the same batch.
type Sink interface {
	// Export writes the batch. It returns nil only when the sink durably holds the snapshot.
	Export(ctx context.Context, b *Batch) error
	// Probe checks that the sink is reachable and usable with its credentials, without
	// writing inventory data.
	Probe(ctx context.Context) error
	// Preview describes what an export of the inventory would write, without side effects.
	Preview(ctx context.Context, cluster, inventory string) (Preview, error)
	// Close releases connections.
	Close() error
}

// Preview mirrors v1alpha1.SinkPreview, filled by each sink type.
type Preview struct {
	Destination string
	Paths       []string
	Message     string
	Statements  []string
}
