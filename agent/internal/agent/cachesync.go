package agent

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// cacheSyncTimeout is how long a term's controllers wait for the manager's caches (the Kollect
// kinds and namespaces) before the term fails, and with it the process.
//
// Why not controller-runtime's 2 minutes: each controller's sources wait for the whole cache to
// sync, not only their own kind, and the caches list through the same API server as the
// collector's watches. With 100 tenants, the agent restarted on 100,000 ConfigMaps relisted
// them once per target (issue 21): the API server was busy long enough that the
// KollectProfile source gave up after 2 minutes and the agent exited, to be restarted into
// the same storm. The collector now lists a kind once for a burst of targets (collector.
// CoalesceOptions), which removes the storm; the longer timeout keeps a slow API server (a
// large cluster, an outage ending) from turning a slow start into a crash loop, and
// cacheSyncProgress says what the term waits for meanwhile.
const cacheSyncTimeout = 10 * time.Minute

// cacheSyncProgress logs, every interval until a term's caches have synced, that the term is
// still waiting for them: a slow start is visible before the timeout ends it.
type cacheSyncProgress struct {
	cache    cache.Cache
	interval time.Duration
	log      logr.Logger
}

func (p cacheSyncProgress) Start(ctx context.Context) error {
	start, waited := time.Now(), false
	tick := time.NewTicker(p.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		// The informers present now: the controllers have asked for theirs by the first tick.
		check, cancel := context.WithTimeout(ctx, time.Second)
		ok := p.cache.WaitForCacheSync(check)
		cancel()
		if ok {
			if waited {
				p.log.Info("caches synced", "after", time.Since(start).Round(time.Second).String())
			}
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
		waited = true
		p.log.Info("waiting for the caches of the Kollect kinds to sync; the controllers start once they have",
			"waited", time.Since(start).Round(time.Second).String(), "timeout", cacheSyncTimeout.String())
	}
}

func (cacheSyncProgress) NeedLeaderElection() bool { return false }
