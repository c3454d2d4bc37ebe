package fleet

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	"kollect.dev/hub/internal/agentstatus"
	"kollect.dev/hub/internal/assign"
	"kollect.dev/hub/internal/health"
	"kollect.dev/hub/internal/store"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// View computes the fleet's health from the store.
type View struct {
	Store   store.Store
	Builder *assign.Builder
	Th      health.Thresholds
	Now     func() time.Time

	mu     sync.Mutex
	parsed map[string]parsedStatus // cluster → last decoded status
}

// parsedStatus caches a decoded heartbeat: statuses only change with a heartbeat, and decoding
// thousands of them on every snapshot would dominate its cost. It keeps a hash of the stored
// JSON rather than the JSON, which is a few KiB per cluster (17 MiB of a replica's live heap
// at 5,000 agents); a changed status that hashes the same (odds 2^-64) would show the previous
// one until its next change.
type parsedStatus struct {
	sum    uint64
	status *fleetv1.AgentStatus
}

// statusSeed seeds the hashes of parsedStatus; they never leave the process.
var statusSeed = maphash.MakeSeed()

// Snapshot reads the fleet and derives its health now.
func (v *View) Snapshot(ctx context.Context) (*health.Fleet, error) {
	clusters, err := v.Store.ListClusters(ctx)
	if err != nil {
		return nil, fmt.Errorf("fleet snapshot: %w", err)
	}
	digests, desired, err := v.Builder.Digests(ctx)
	if err != nil {
		return nil, fmt.Errorf("fleet snapshot: %w", err)
	}
	byCluster := map[string][]store.Desired{}
	for _, d := range desired {
		byCluster[d.Cluster] = append(byCluster[d.Cluster], d)
	}
	inputs := make([]health.Input, 0, len(clusters))
	v.mu.Lock()
	if v.parsed == nil {
		v.parsed = map[string]parsedStatus{}
	}
	for _, c := range clusters {
		digest, ok := digests[c.Name]
		if !ok {
			digest = assign.EmptyDigest
		}
		inputs = append(inputs, health.Input{Cluster: c, Desired: byCluster[c.Name], DesiredDigest: digest, Status: v.status(c)})
	}
	v.mu.Unlock()
	return health.Build(inputs, v.Now(), v.Th), nil
}

// status decodes c's stored status, reusing the last decode when unchanged. Caller holds mu.
func (v *View) status(c store.Cluster) *fleetv1.AgentStatus {
	if c.Status == "" {
		return nil
	}
	sum := maphash.String(statusSeed, c.Status)
	if p, ok := v.parsed[c.Name]; ok && p.sum == sum {
		return p.status
	}
	st := &fleetv1.AgentStatus{}
	if err := agentstatus.Decode(c.Status, st); err != nil {
		// Written by this hub from a decoded message, so this means a corrupt row: show the
		// cluster without status rather than failing the whole fleet view.
		st = nil
	}
	v.parsed[c.Name] = parsedStatus{sum: sum, status: st}
	return st
}
