package assign

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"kollect.dev/hub/internal/bundle"
	"kollect.dev/hub/internal/store"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// Builder builds agents' configuration from desired revisions.
type Builder struct {
	store store.Store

	mu    sync.Mutex
	cache map[string]*fleetv1.BundleAssignment // "bundle\x00revision" → content
}

// New returns a Builder reading revisions from s.
func New(s store.Store) *Builder {
	return &Builder{store: s, cache: map[string]*fleetv1.BundleAssignment{}}
}

// Digest is the config digest of a set of desired revisions, given each revision's digest. It
// is what WatchConfigResponse.config_digest carries and what agents report back as applied.
func Digest(items []*fleetv1.BundleAssignment) string {
	h := sha256.New()
	for _, a := range items {
		h.Write([]byte(a.GetBundle() + "\x00" + strconv.FormatInt(a.GetRevision(), 10) + "\x00" + a.GetDigest() + "\n"))
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// revision returns the cached assignment of one revision, reading it on first use.
func (b *Builder) revision(ctx context.Context, name string, rev int64) (*fleetv1.BundleAssignment, error) {
	key := name + "\x00" + strconv.FormatInt(rev, 10)
	b.mu.Lock()
	a, ok := b.cache[key]
	b.mu.Unlock()
	if ok {
		return a, nil
	}
	r, err := b.store.GetRevision(ctx, name, rev)
	if err != nil {
		return nil, fmt.Errorf("loading %s@%d: %w", name, rev, err)
	}
	var refs []bundle.ObjectRef
	if err := json.Unmarshal([]byte(r.Objects), &refs); err != nil {
		return nil, fmt.Errorf("decoding objects of %s@%d: %w", name, rev, err)
	}
	a = &fleetv1.BundleAssignment{Bundle: name, Revision: rev, Digest: r.Digest, Manifests: r.Manifests}
	for _, o := range refs {
		a.Objects = append(a.Objects, &fleetv1.ObjectRef{ApiVersion: o.APIVersion, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name})
	}
	b.mu.Lock()
	b.cache[key] = a
	b.mu.Unlock()
	return a, nil
}

// Assignments returns the sorted assignments for desired rows of one cluster.
func (b *Builder) Assignments(ctx context.Context, desired []store.Desired) ([]*fleetv1.BundleAssignment, error) {
	out := make([]*fleetv1.BundleAssignment, 0, len(desired))
	for _, d := range desired {
		a, err := b.revision(ctx, d.Bundle, d.Revision)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetBundle() < out[j].GetBundle() })
	return out, nil
}

// ForCluster reads a cluster's desired revisions and builds its configuration.
func (b *Builder) ForCluster(ctx context.Context, cluster string) (*fleetv1.WatchConfigResponse, error) {
	desired, err := b.store.Desired(ctx, cluster)
	if err != nil {
		return nil, fmt.Errorf("desired config of %s: %w", cluster, err)
	}
	items, err := b.Assignments(ctx, desired)
	if err != nil {
		return nil, fmt.Errorf("config of %s: %w", cluster, err)
	}
	return &fleetv1.WatchConfigResponse{Bundles: items, ConfigDigest: Digest(items), SentAt: timestamppb.New(time.Now())}, nil
}

// Digests returns every cluster's desired config digest from one read of all desired rows.
// Clusters without bundles are absent (their digest is Digest(nil)).
func (b *Builder) Digests(ctx context.Context) (map[string]string, []store.Desired, error) {
	desired, err := b.store.Desired(ctx, "")
	if err != nil {
		return nil, nil, fmt.Errorf("desired config of the fleet: %w", err)
	}
	byCluster := map[string][]store.Desired{}
	for _, d := range desired {
		byCluster[d.Cluster] = append(byCluster[d.Cluster], d)
	}
	out := make(map[string]string, len(byCluster))
	for cluster, ds := range byCluster {
		items, err := b.Assignments(ctx, ds)
		if err != nil {
			return nil, nil, err
		}
		out[cluster] = Digest(items)
	}
	return out, desired, nil
}

// EmptyDigest is the digest of a cluster with no bundles.
var EmptyDigest = Digest(nil)
