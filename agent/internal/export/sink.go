package export

import (
	"context"
	"errors"
	"fmt"
)

// Batch is one export of one inventory to one sink.
type Batch struct {
	// Envelope carries the full current snapshot.
	Envelope Envelope
	// Diff is relative to the snapshot the sink accepted last (PreviousChecksum).
	Diff Diff
	// PreviousChecksum is the checksum the sink accepted last, "" when unknown. Database sinks
	// compare it with their state table to decide between applying the diff and a full
	// reconcile.
	PreviousChecksum string
	// Resync marks a periodic full re-send requested by the inventory's resyncInterval.
	Resync bool
}

// Sink is a destination of inventory exports. The exporter calls a Sink from one goroutine per
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

// ErrorClass says whether retrying can help.
type ErrorClass string

// Error classes.
const (
	// Transient errors (network, timeouts, conflicts, throttling) are retried with backoff.
	Transient ErrorClass = "transient"
	// Terminal errors (bad credentials, missing bucket, invalid configuration) wait for a
	// change of configuration; retrying the same call cannot help.
	Terminal ErrorClass = "terminal"
)

type classified struct {
	class ErrorClass
	err   error
}

func (e *classified) Error() string { return e.err.Error() }
func (e *classified) Unwrap() error { return e.err }

// TransientError marks err as retryable.
func TransientError(err error) error {
	if err == nil {
		return nil
	}
	return &classified{Transient, err}
}

// TerminalError marks err as not retryable until the configuration changes.
func TerminalError(err error) error {
	if err == nil {
		return nil
	}
	return &classified{Terminal, err}
}

// Terminalf formats a terminal error.
func Terminalf(format string, args ...any) error { return TerminalError(fmt.Errorf(format, args...)) }

// ClassOf returns the class of err: the innermost classification wins, unclassified errors and
// context deadlines are transient.
func ClassOf(err error) ErrorClass {
	var c *classified
	if errors.As(err, &c) {
		return c.class
	}
	return Transient
}
