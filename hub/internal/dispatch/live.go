package dispatch

import (
	"context"
	"time"

	"kollect.dev/hub/internal/store"
)

// liveRescan bounds how long a read of the fleet's membership is trusted while the cluster
// epoch stands still, for changes no epoch announces (a row edited by hand, a replica of an
// older version writing the store).
const liveRescan = 30 * time.Second

// liveClusters caches the names of the unrevoked clusters against the cluster epoch, which
// every registration, revocation, release and deletion moves through any replica. A
// snapshot is built on every change of desired configuration (each wave of a rollout, on
// every replica), and the membership it needs rarely changes meanwhile: on PostgreSQL the
// read of 10,000 names from a table every heartbeat rewrites took about 0.4 s of the
// server's time, and was half of its work during a rollout.
type liveClusters struct {
	epoch int64
	at    time.Time
	names []string
}

// read returns the live clusters, reading them only when the cluster epoch moved since the
// last read or liveRescan passed. The epoch is read first: names read after it are at least
// that new, so a change is never missed, at worst read twice.
func (l *liveClusters) read(ctx context.Context, s store.Store) ([]string, error) {
	epoch, err := s.ClusterEpoch(ctx)
	if err != nil {
		return nil, err
	}
	if l.names != nil && epoch == l.epoch && time.Since(l.at) < liveRescan {
		return l.names, nil
	}
	names, err := s.LiveClusters(ctx)
	if err != nil {
		return nil, err
	}
	if names == nil {
		names = []string{}
	}
	l.epoch, l.at, l.names = epoch, time.Now(), names
	return names, nil
}
