package snapshot

import (
	"context"
	"fmt"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

// ObjectStore is an object store a snapshot sink publishes to (S3, GCS). V is the store's
// version token of the manifest, for a conditional write that detects a concurrent writer.
type ObjectStore[V any] interface {
	// ReadManifest returns the stored manifest, nil when there is none.
	ReadManifest(ctx context.Context, key string) (*Manifest, V, error)
	// ListOwned lists the stored paths the matcher owns (this cluster's and inventory's).
	ListOwned(ctx context.Context, m *Matcher) ([]string, error)
	PutAll(ctx context.Context, files []File) error
	// PutManifest writes the manifest only if it is still at version.
	PutManifest(ctx context.Context, key string, data []byte, version V) error
	DeleteAll(ctx context.Context, paths []string) error
}

// Confirm records in the manifest, and nowhere else, that the store still holds the snapshot
// with c's checksum: the manifest is rewritten with a new confirmedAt and c's writer
// (conditionally, like an export's, so a concurrent writer is not overwritten) and no
// document is touched. A missing manifest, or one of another checksum, is sink.ErrNotHeld.
func Confirm[V any](ctx context.Context, store ObjectStore[V], manifestKey string, c sink.Confirmation) error {
	m, version, err := store.ReadManifest(ctx, manifestKey)
	if err != nil {
		return err
	}
	check := writerCheck(m, c.Cluster, c.Inventory, c.Writer, c.At, c.ConflictWindow)
	if refusal := check.Refusal(); refusal != nil {
		return refuse(ctx, store, manifestKey, m, version, check, refusal)
	}
	if m == nil || m.Checksum != c.Checksum {
		held := "no manifest"
		if m != nil {
			held = "manifest of checksum " + m.Checksum
		}
		return fmt.Errorf("%s holds %s: %w", manifestKey, held, sink.ErrNotHeld)
	}
	m.ConfirmedAt = c.At.UTC()
	m.Writer = c.Writer
	if err := store.PutManifest(ctx, manifestKey, m.Marshal(), version); err != nil {
		return err
	}
	return check.Contention()
}

// Publication counts what one export to an object store did.
type Publication struct {
	Written, Unchanged, Deleted int
	ManifestWritten             bool
}

// Publish brings an object store to the batch's snapshot: documents that changed first, then
// the manifest, then the pruning of documents the snapshot no longer holds, so a reader that
// trusts the manifest never sees a torn export. Unchanged stores are not written at all, a
// store whose documents are current but whose manifest records another coverage gets the
// manifest alone, and when the store holds the previous snapshot only the documents the diff
// touches are rendered.
func Publish[V any](ctx context.Context, o Options, store ObjectStore[V], manifestKey string, b *sink.Batch) (Publication, error) {
	old, version, err := store.ReadManifest(ctx, manifestKey)
	if err != nil {
		return Publication{}, err
	}
	check := writerCheck(old, b.Envelope.Cluster, b.Envelope.Inventory, b.Envelope.Writer, b.Envelope.ExportedAt, b.ConflictWindow)
	if refusal := check.Refusal(); refusal != nil {
		return Publication{ManifestWritten: true}, refuse(ctx, store, manifestKey, old, version, check, refusal)
	}
	pub, err := publish(ctx, o, store, manifestKey, b, old, version)
	if err != nil {
		return pub, err
	}
	return pub, check.Contention()
}

// publish is Publish once the writer may write.
func publish[V any](ctx context.Context, o Options, store ObjectStore[V], manifestKey string, b *sink.Batch, old *Manifest, version V) (Publication, error) {
	var err error
	if !b.Resync && o.Current(old, b.Envelope.Checksum) {
		// The documents are the snapshot's already; only the coverage may have changed.
		return publishCoverage(ctx, store, manifestKey, old, version, &b.Envelope, len(old.Files))
	}
	var rendered *Rendered
	var plan Plan
	if !b.Resync && !b.Diff.Full && b.PreviousChecksum != "" && o.Current(old, b.PreviousChecksum) {
		if rendered, plan, err = o.Patch(old, &b.Envelope, &b.Diff); err != nil {
			return Publication{}, err
		}
	} else {
		if rendered, err = o.Render(&b.Envelope); err != nil {
			return Publication{}, err
		}
		var listed []string
		if old == nil || b.Resync {
			// No trustworthy record of what is stored (first export, or a periodic resync):
			// list the inventory's keys so stale documents are pruned too.
			if listed, err = store.ListOwned(ctx, rendered.Matcher); err != nil {
				return Publication{}, err
			}
		}
		plan = rendered.Plan(old.Hashes(), listed)
	}
	if len(plan.Write) == 0 && len(plan.Delete) == 0 && o.Current(old, b.Envelope.Checksum) {
		// A resync that found the store already holding this snapshot: nothing to repair, and
		// a manifest rewritten only for a new exportedAt would be a write while data is static.
		// A new coverage is still recorded.
		return publishCoverage(ctx, store, manifestKey, old, version, &b.Envelope, plan.Unchanged)
	}
	if err := store.PutAll(ctx, plan.Write); err != nil {
		return Publication{}, err
	}
	if old != nil && !export.Complete(b.Envelope.Coverage) {
		// Kept rows of a target the agent cannot see are not confirmed current: confirmedAt
		// stays, as the delivery worker's confirmation does.
		rendered.Manifest.ConfirmedAt = old.ConfirmedAt
	}
	keepMark(&rendered.Manifest, old)
	if err := store.PutManifest(ctx, manifestKey, rendered.Manifest.Marshal(), version); err != nil {
		return Publication{}, err
	}
	if err := store.DeleteAll(ctx, plan.Delete); err != nil {
		return Publication{}, err
	}
	return Publication{Written: len(plan.Write), Unchanged: plan.Unchanged, Deleted: len(plan.Delete), ManifestWritten: true}, nil
}

// publishCoverage records env's coverage in old, the manifest of a store that already holds
// env's documents, by rewriting the manifest alone (conditionally, like any manifest write):
// no document is written, and a coverage equal to the stored one writes nothing at all.
// exportedAt stays, since the documents did not change; the export names its writer, and
// confirms the snapshot (confirmedAt) only when every target is complete, as the delivery
// worker does: kept rows of a forbidden target are not confirmed current.
func publishCoverage[V any](ctx context.Context, store ObjectStore[V], manifestKey string, old *Manifest, version V, env *export.Envelope, unchanged int) (Publication, error) {
	if SameCoverage(old.Coverage, env.Coverage) {
		return Publication{Unchanged: unchanged}, nil
	}
	m := *old
	m.Coverage = env.Coverage
	m.Generation = env.Generation
	m.Writer = env.Writer
	if export.Complete(env.Coverage) {
		m.ConfirmedAt = env.ExportedAt.UTC()
	}
	if err := store.PutManifest(ctx, manifestKey, m.Marshal(), version); err != nil {
		return Publication{}, err
	}
	return Publication{Unchanged: unchanged, ManifestWritten: true}, nil
}

// SameCoverage reports whether two normalized coverage lists say the same.
func SameCoverage(a, b []export.Coverage) bool {
	return export.CoverageDigest(a) == export.CoverageDigest(b)
}
