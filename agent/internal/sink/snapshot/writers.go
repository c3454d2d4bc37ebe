package snapshot

import (
	"context"
	"time"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

// One writer per (cluster, inventory) in an object store: the manifest names its writer, and
// an export or confirmation of another instance while that writer is live (it wrote within
// the conflict window) is refused, writing only a contender mark into the manifest, with
// the manifest's conditional write like any other.

// writerCheck is the sink.WriterCheck of a stored manifest; nil (no manifest) names nobody.
func writerCheck(m *Manifest, cluster, inventory string, self export.Writer, now time.Time, window time.Duration) sink.WriterCheck {
	c := sink.WriterCheck{Cluster: cluster, Inventory: inventory, Self: self, Now: now, Window: window}
	if m == nil {
		return c
	}
	c.Holder, c.HolderLastWrite = m.Writer, m.ExportedAt
	if m.ConfirmedAt.After(c.HolderLastWrite) {
		c.HolderLastWrite = m.ConfirmedAt
	}
	c.Contender, c.ContendedAt = m.Contender, m.ContendedAt
	return c
}

// refuse leaves self's contender mark in the holder's manifest and returns the refusal.
func refuse[V any](ctx context.Context, store ObjectStore[V], key string, m *Manifest, version V, c sink.WriterCheck, refusal error) error {
	marked := *m
	marked.Contender, marked.ContendedAt = c.Self, c.Now.UTC()
	if err := store.PutManifest(ctx, key, marked.Marshal(), version); err != nil {
		return err
	}
	return refusal
}

// keepMark carries the stored manifest's contender mark into the one replacing it.
func keepMark(next, old *Manifest) {
	if old != nil {
		next.Contender, next.ContendedAt = old.Contender, old.ContendedAt
	}
}
