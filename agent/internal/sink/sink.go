package sink

import (
	"context"
	"errors"
	"time"

	"kollect.dev/agent/internal/export"
)

// Batch is one export of one inventory to one sink. A batch may carry the checksum the sink
// holds already, with an empty diff, when only Envelope.Coverage changed (a target turned
// forbidden and its rows were kept): Export then writes the coverage and no row.
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
	// ConflictWindow is how long another writer of the same (cluster, inventory) holds the
	// sink after its last write (see WriterCheck); zero means DefaultConflictWindow.
	ConflictWindow time.Duration
}

// Sink is a destination of inventory exports. The agent calls a Sink from one goroutine per
// sink, with a deadline on every call, and retries failed calls with backoff: Export must be
// idempotent for the same batch.
type Sink interface {
	// Export writes the batch. It returns nil only when the sink durably holds the snapshot,
	// or a *ContendedError: the sink holds it too, and another agent tried to write the same
	// (cluster, inventory) within the window. A sink that keeps a state record returns a
	// *WriterConflictError, having written no row, when another agent holds the state (see
	// WriterCheck).
	Export(ctx context.Context, b *Batch) error
	// Probe checks that the sink is reachable and usable with its credentials, without
	// writing inventory data.
	Probe(ctx context.Context) error
	// Preview describes what an export of the inventory would write, without side effects.
	Preview(ctx context.Context, cluster, inventory string) (Preview, error)
	// Close releases connections.
	Close() error
}

// Confirmer is implemented by sinks that keep a small state record per (cluster, inventory):
// Confirm records, without writing a row, that the sink still holds the snapshot with the
// given checksum, so its readers can tell a quiet cluster from a dead agent. A sink without
// it is confirmed by its connection test alone, and its readers see the confirmation in the
// agent's status, metrics and the hub only. Confirm checks the writer as Export does: a
// *WriterConflictError when another agent holds the state, a *ContendedError after a
// successful confirmation that another agent contends.
type Confirmer interface {
	Confirm(ctx context.Context, c Confirmation) error
}

// Confirmation is what one confirmation states.
type Confirmation struct {
	Cluster, Inventory string
	// Checksum is the snapshot the agent believes the sink holds.
	Checksum string
	// At is the confirmation's time.
	At time.Time
	// Writer is the agent confirming; the state records it as its last writer.
	Writer export.Writer
	// Coverage is the coverage the sink accepted with the checksum (always complete: only a
	// complete snapshot is confirmed), for sinks that rewrite their whole state record.
	Coverage []export.Coverage
	// ConflictWindow is as in Batch.
	ConflictWindow time.Duration
}

// ErrNotHeld is returned (wrapped) by Confirm when the sink's state names another snapshot
// than the checksum confirmed, or none: someone else wrote there, or it was cleared. The agent
// then exports again in full.
var ErrNotHeld = errors.New("the sink does not hold the snapshot to confirm")

// Preview mirrors v1alpha1.SinkPreview, filled by each sink type.
type Preview struct {
	Destination string
	Paths       []string
	Message     string
	Statements  []string
}
