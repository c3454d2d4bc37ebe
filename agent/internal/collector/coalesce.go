package collector

import (
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// CoalesceOptions gather the target changes of a kind into one restart of its watch.
//
// Why: a kind's watch is shared by its targets and frozen on what they need (projection), so a
// change of a target restarts it, and a restart lists every object of the kind again. Targets
// arrive one reconcile at a time: an agent starting with 100 tenants registered 100 targets of
// ConfigMap in a burst and listed every ConfigMap 100 times, so long that the API server and
// the agent's own caches starved (issue 21). A restart therefore waits until the kind's targets
// have been quiet for Quiet, and never longer than MaxWait after the first change it waits for,
// so a burst costs one list and a steady trickle of changes one list per MaxWait. Meanwhile
// the running watch keeps serving the targets it was built for; a target it was not built for
// (new, or changed) reports that it is syncing (Collect), never rows of an older selection.
type CoalesceOptions struct {
	Quiet, MaxWait time.Duration
}

// DefaultCoalesce waits for 1 s without a change of a kind's targets, at most 10 s: a burst of
// target reconciles at start-up is far denser than that, and 10 s is well inside an
// inventory's default maxDelay.
var DefaultCoalesce = CoalesceOptions{Quiet: time.Second, MaxWait: 10 * time.Second}

// NoCoalesce restarts a kind's watch at once on every change of its targets.
var NoCoalesce = CoalesceOptions{Quiet: -1}

// pendingRestart is a kind's restart waiting for its targets to be quiet.
type pendingRestart struct {
	first time.Time
	timer *time.Timer
}

// restartLocked restarts the watch of a kind once its targets have been quiet for a while
// (CoalesceOptions); before Start it only prepares the watch.
func (c *Collector) restartLocked(gvk schema.GroupVersionKind) {
	if c.ctx == nil || c.coalesce.Quiet <= 0 {
		c.restartNowLocked(gvk)
		return
	}
	now := time.Now()
	p := c.pending[gvk]
	if p == nil {
		p = &pendingRestart{first: now}
		c.pending[gvk] = p
		p.timer = time.AfterFunc(c.coalesce.Quiet, func() { c.firePending(gvk, p) })
		return
	}
	// A timer that already fired and waits for the lock restarts with every change so far;
	// firePending ignores the timer a Reset starts again then.
	p.timer.Reset(max(0, min(c.coalesce.Quiet, p.first.Add(c.coalesce.MaxWait).Sub(now))))
}

// firePending runs a coalesced restart.
func (c *Collector) firePending(gvk schema.GroupVersionKind, p *pendingRestart) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending[gvk] != p {
		return
	}
	delete(c.pending, gvk)
	if c.ctx.Err() != nil {
		return
	}
	c.restartNowLocked(gvk)
}
