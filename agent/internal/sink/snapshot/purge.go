package snapshot

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"kollect.dev/agent/internal/sink"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

// PurgeStore is what Holdings and Purge need of an object store (S3, GCS): listing, reading
// manifests and deleting. V is the store's version token of a manifest, as in ObjectStore.
type PurgeStore[V any] interface {
	// ReadManifest returns the stored manifest, nil when there is none (or it is unreadable).
	ReadManifest(ctx context.Context, key string) (*Manifest, V, error)
	// List lists the stored paths (relative to the sink's root) under prefix; shallow lists
	// only those without a further "/" after the prefix.
	List(ctx context.Context, prefix string, shallow bool) ([]string, error)
	// DeleteAll removes documents; one already gone is fine.
	DeleteAll(ctx context.Context, paths []string) error
	// DeleteManifest removes the manifest only if it is still at version; a manifest that
	// changed is an error wrapping ErrManifestChanged, one already gone is fine.
	DeleteManifest(ctx context.Context, key string, version V) error
}

// ErrManifestChanged is returned (wrapped) by a PurgeStore's DeleteManifest when the
// manifest was rewritten since it was read: its agent wrote meanwhile.
var ErrManifestChanged = errors.New("the manifest changed since it was read")

// manifestSuffix ends every manifest's name (see ManifestPath).
const manifestSuffix = ".manifest.json"

// held is one inventory's manifest with what it names in the store.
type held[V any] struct {
	key      string
	version  V
	holding  sink.Holding
	document []string
}

// Holdings reports what the store holds of cluster (of inventory, unless ""), read from the
// manifests, which always sit at <cluster>/<inventory>.manifest.json whatever the layout: for
// each manifest of the cluster its rows, coverage entries, times and writer, and the count of
// documents its own path template (recorded in it) matches under the template's prefix, the
// stale ones an interrupted export left included. Documents of an inventory without a
// manifest are not found: nothing tells their layout. Cost: one shallow listing of the
// cluster's directory (none for one inventory), one read per manifest, one listing of each
// inventory's document prefix. It only reads.
func Holdings[V any](ctx context.Context, store PurgeStore[V], cluster, inventory string) ([]sink.Holding, error) {
	hs, err := holdings(ctx, store, cluster, inventory)
	if err != nil {
		return nil, err
	}
	set := sink.HoldingSet{}
	for _, h := range hs {
		*set.Of(h.holding.Inventory) = h.holding
	}
	return set.List(), nil
}

func holdings[V any](ctx context.Context, store PurgeStore[V], cluster, inventory string) ([]held[V], error) {
	var keys []string
	if inventory != "" {
		keys = []string{ManifestPath(cluster, inventory)}
	} else {
		listed, err := store.List(ctx, prefixPath(cluster)+"/", true)
		if err != nil {
			return nil, err
		}
		for _, k := range listed {
			if strings.HasSuffix(k, manifestSuffix) {
				keys = append(keys, k)
			}
		}
	}
	var out []held[V]
	for _, key := range keys {
		m, version, err := store.ReadManifest(ctx, key)
		if err != nil {
			return nil, err
		}
		// A manifest of another cluster or inventory whose name cleans to the same path
		// segment ("a/b" and "a_b") is not this one's.
		if m == nil || m.Cluster != cluster || (inventory != "" && m.Inventory != inventory) || key != ManifestPath(cluster, m.Inventory) {
			continue
		}
		o := Options{Format: v1alpha1.Format(m.Format), Compression: v1alpha1.Compression(m.Compression), Promoted: m.Promoted,
			Mode: v1alpha1.LayoutMode(m.Layout), Template: m.PathTemplate}
		if checkTemplate(o.Template, rowPlaceholders) != nil {
			return nil, sink.Terminalf("manifest %s names the path template %q, which this Kollect cannot read: purge it by hand", key, m.PathTemplate)
		}
		matcher := o.Matcher(cluster, m.Inventory)
		listed, err := store.List(ctx, matcher.Prefix, false)
		if err != nil {
			return nil, err
		}
		var docs []string
		for _, p := range listed {
			if matcher.Match(p) {
				docs = append(docs, p)
			}
		}
		out = append(out, held[V]{key: key, version: version, document: docs, holding: sink.Holding{
			Inventory: m.Inventory, Rows: m.ItemCount, CoverageEntries: len(m.Coverage), StateRecords: 1, Objects: len(docs),
			ChangedAt: m.ExportedAt.UTC(), ConfirmedAt: m.ConfirmedAt.UTC(), Writer: m.Writer}})
	}
	return out, nil
}

// Purge removes the cluster's documents and manifests (of one inventory unless ""), after
// checking cutoff on every manifest as Holdings read it (sink.Purger). Per inventory the
// documents go first and the manifest last, with the store's conditional delete: a purge
// interrupted half-way leaves the manifest, so Holdings still finds the inventory and a new
// purge finishes it; an agent that wrote the manifest after it was read (it came back during
// the purge) makes the manifest's delete fail with ErrManifestChanged, and its next resync
// rewrites the documents. Only paths the manifest's own template produces for this cluster
// and inventory are deleted, so other clusters' objects are never touched.
func Purge[V any](ctx context.Context, store PurgeStore[V], cluster, inventory string, cutoff time.Time) ([]sink.Holding, error) {
	hs, err := holdings(ctx, store, cluster, inventory)
	if err != nil {
		return nil, err
	}
	all := make([]sink.Holding, len(hs))
	for i, h := range hs {
		all[i] = h.holding
	}
	if late := sink.NotRetired(all, cutoff); len(late) > 0 {
		return nil, sink.NotRetiredError(cluster, late, cutoff)
	}
	set := sink.HoldingSet{}
	for _, h := range hs {
		if err := store.DeleteAll(ctx, h.document); err != nil {
			return set.List(), fmt.Errorf("inventory %s: deleting %d documents: %w", h.holding.Inventory, len(h.document), err)
		}
		if err := store.DeleteManifest(ctx, h.key, h.version); err != nil {
			return set.List(), fmt.Errorf("inventory %s: its documents are deleted, but not %s: %w", h.holding.Inventory, h.key, err)
		}
		*set.Of(h.holding.Inventory) = h.holding
	}
	return set.List(), nil
}
