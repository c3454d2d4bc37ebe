package sinktest

import (
	"context"
	"time"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

// Exporter drives a sink the way the agent's delivery worker does, for sink tests: each batch
// carries the diff against the snapshot the sink accepted last and that snapshot's checksum;
// a failed export leaves the baseline unchanged, so retrying the same snapshot resends it.
type Exporter struct {
	// Cluster and Inventory stamp the envelopes ("c1" and "pods" when empty).
	Cluster, Inventory string
	// Accepted is the snapshot the sink accepted last; nil means unknown (a full diff).
	Accepted *export.Snapshot
	// Gen is the last generation used; envelopes get Gen+1 and a time derived from it.
	Gen int64
	// Writer names the agent in every envelope (its Envelope.Writer).
	Writer export.Writer
}

// Batch builds the next batch for next.
func (e *Exporter) Batch(next *export.Snapshot) *sink.Batch {
	e.Gen++
	cluster, inventory := e.Cluster, e.Inventory
	if cluster == "" {
		cluster = "c1"
	}
	if inventory == "" {
		inventory = "pods"
	}
	b := &sink.Batch{Diff: export.Compute(e.Accepted, next), Envelope: export.Envelope{
		SchemaVersion: export.SchemaVersion, Cluster: cluster, Inventory: inventory, Generation: e.Gen,
		ExportedAt: time.Unix(1_800_000_000+e.Gen, 0).UTC(), ItemCount: len(next.Rows),
		Checksum: next.Checksum, Rows: next.Rows, Writer: e.Writer}}
	if e.Accepted != nil {
		b.PreviousChecksum = e.Accepted.Checksum
	}
	return b
}

// Export sends the batch for next and, on success, makes next the baseline.
func (e *Exporter) Export(ctx context.Context, s sink.Sink, next *export.Snapshot) error {
	if err := s.Export(ctx, e.Batch(next)); err != nil {
		return err
	}
	e.Accepted = next
	return nil
}
