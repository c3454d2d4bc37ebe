package snapshot

import (
	"context"
	"fmt"

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
	if m == nil || m.Checksum != c.Checksum {
		held := "no manifest"
		if m != nil {
			held = "manifest of checksum " + m.Checksum
		}
		return fmt.Errorf("%s holds %s: %w", manifestKey, held, sink.ErrNotHeld)
	}
	m.ConfirmedAt = c.At.UTC()
	m.Writer = c.Writer
	return store.PutManifest(ctx, manifestKey, m.Marshal(), version)
}

// Publication counts what one export to an object store did.
type Publication struct {
	Written, Unchanged, Deleted int
	ManifestWritten             bool
}

// Publish brings an object store to the batch's snapshot: documents that changed first, then
// the manifest, then the pruning of documents the snapshot no longer holds, so a reader that
// trusts the manifest never sees a torn export. Unchanged stores are not written at all, and
// when the store holds the previous snapshot only the documents the diff touches are
// rendered.
func Publish[V any](ctx context.Context, o Options, store ObjectStore[V], manifestKey string, b *sink.Batch) (Publication, error) {
	old, version, err := store.ReadManifest(ctx, manifestKey)
	if err != nil {
		return Publication{}, err
	}
	if !b.Resync && o.Current(old, b.Envelope.Checksum) {
		return Publication{Unchanged: len(old.Files)}, nil
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
		return Publication{Unchanged: plan.Unchanged}, nil
	}
	if err := store.PutAll(ctx, plan.Write); err != nil {
		return Publication{}, err
	}
	if err := store.PutManifest(ctx, manifestKey, rendered.Manifest.Marshal(), version); err != nil {
		return Publication{}, err
	}
	if err := store.DeleteAll(ctx, plan.Delete); err != nil {
		return Publication{}, err
	}
	return Publication{Written: len(plan.Write), Unchanged: plan.Unchanged, Deleted: len(plan.Delete), ManifestWritten: true}, nil
}
