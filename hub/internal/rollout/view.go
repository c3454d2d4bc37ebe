package rollout

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"kollect.dev/hub/internal/agentstatus"
	"kollect.dev/hub/internal/health"
	"kollect.dev/hub/internal/store"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// A pass used to read every cluster with its status and every row of the rollout; at 10,000
// clusters that was most of the hub's CPU during a rollout. A view keeps both between passes,
// and a pass reads only what can have changed:
//
//   - the rollout's rows, again only when the rollout's version is not the one the view holds
//     (the engine's own steps are applied to the view as they are written);
//   - the whole fleet (labels, revocation, desired revision; no status), again only when the
//     cluster epoch moved (a registration, relabelling, revocation or deletion, through any
//     replica: what makes clusters join or leave a rollout) or rescanEvery passed;
//   - the clusters the pass judges or may move — the unfinished rows of started waves and of
//     the next one — fresh on every pass, and the status only of those whose heartbeat time
//     changed since it was last decoded.
type view struct {
	version int64                  // rollout version rows are at; 0: read them again
	rows    []store.RolloutCluster // sorted by cluster
	epoch   int64                  // cluster epoch fleet was read at
	scanned time.Time              // when fleet was read; zero: read it again
	fleet   map[string]Observation // every registered cluster
	// parsed holds the decoded statuses of the clusters the last pass judged.
	parsed map[string]parsedStatus
}

// rescanEvery bounds how long a view's fleet is trusted without a read, for changes no epoch
// announces (a row edited by hand, a replica of an older version writing the store).
const rescanEvery = 30 * time.Second

// observe brings r's view up to date for a pass at now and returns it with the reader of the
// statuses Advance asks for.
func (e *Engine) observe(ctx context.Context, r store.Rollout, now time.Time) (*view, *statusReader, error) {
	e.mu.Lock()
	v := e.views[r.ID]
	if v == nil {
		v = &view{}
		e.views[r.ID] = v
	}
	e.mu.Unlock()
	epoch, err := e.store.ClusterEpoch(ctx)
	if err != nil {
		return nil, nil, err
	}
	if v.version != r.Version {
		rows, err := e.store.RolloutClusters(ctx, r.ID)
		if err != nil {
			return nil, nil, err
		}
		e.mu.Lock()
		v.rows, v.version = rows, r.Version
		e.mu.Unlock()
	}
	if v.fleet == nil || v.epoch != epoch || now.Sub(v.scanned) >= rescanEvery {
		obs, err := e.store.ObserveFleet(ctx, r.Bundle)
		if err != nil {
			return nil, nil, err
		}
		v.fleet = make(map[string]Observation, len(obs))
		for _, o := range obs {
			v.fleet[o.Name] = e.observation(o, o.Labels, now)
		}
		v.epoch, v.scanned = epoch, now
	}
	judged := judgedClusters(r, v.rows)
	fresh, err := e.store.ObserveClusters(ctx, r.Bundle, judged)
	if err != nil {
		return nil, nil, err
	}
	seen := make(map[string]bool, len(fresh))
	for _, o := range fresh {
		seen[o.Name] = true
		v.fleet[o.Name] = e.observation(o, v.fleet[o.Name].Labels, now)
	}
	for _, name := range judged {
		if !seen[name] {
			delete(v.fleet, name) // deleted since the fleet was read
		}
	}
	sr := &statusReader{e: e, ctx: ctx, v: v}
	return v, sr, sr.prefetch(judged)
}

// observation is what Advance needs of a cluster at now; labels come from the last full read
// when o has none.
func (e *Engine) observation(o store.Observed, labels map[string]string, now time.Time) Observation {
	st := health.State(store.Cluster{Revoked: o.Revoked, LastHeartbeat: o.LastHeartbeat}, now, e.th)
	return Observation{Labels: labels, Live: !o.Revoked, LastHeartbeat: o.LastHeartbeat,
		Offline: st != fleetv1.ClusterState_CLUSTER_STATE_ONLINE, Desired: o.Desired}
}

// judgedClusters names the rows a pass may judge or move: every unfinished row except the
// pending ones of waves after the next (they cannot start in this pass).
func judgedClusters(r store.Rollout, rows []store.RolloutCluster) []string {
	var out []string
	for _, c := range rows {
		if c.State.Done() || (c.State == store.ClusterPending && c.Wave > r.CurrentWave+1) {
			continue
		}
		out = append(out, c.Cluster)
	}
	return out
}

// statusReader gives Advance the decoded status of a cluster, reading from the store only
// the statuses whose heartbeat changed since they were decoded. A cluster Advance asks for
// outside the prefetched ones (a pass that starts two waves) is read on demand; a failed read
// is kept in err, and the pass's step is then discarded.
type statusReader struct {
	e   *Engine
	ctx context.Context
	v   *view
	err error
}

// prefetch reads the statuses of names whose heartbeat moved, and forgets the decoded statuses
// of clusters no longer judged. Only the pass (under Engine.pass) touches a view's parsed.
func (sr *statusReader) prefetch(names []string) error {
	var stale []string
	keep := make(map[string]parsedStatus, len(names))
	for _, name := range names {
		p, ok := sr.v.parsed[name]
		if hb := sr.v.fleet[name].LastHeartbeat; !ok || !p.heartbeat.Equal(hb) {
			stale = append(stale, name)
			continue
		}
		keep[name] = p
	}
	if err := sr.read(stale, keep); err != nil {
		return err
	}
	sr.v.parsed = keep
	return nil
}

// read decodes the stored statuses of names into into.
func (sr *statusReader) read(names []string, into map[string]parsedStatus) error {
	if len(names) == 0 {
		return nil
	}
	raw, err := sr.e.store.ClusterStatuses(sr.ctx, names)
	if err != nil {
		return fmt.Errorf("reading cluster statuses: %w", err)
	}
	for _, name := range names {
		p := parsedStatus{heartbeat: sr.v.fleet[name].LastHeartbeat}
		if s := raw[name]; s != "" {
			st := &fleetv1.AgentStatus{}
			if err := agentstatus.Decode(s, st); err == nil {
				p.status = st
			} // else written by the hub from a decoded message: a corrupt row, treated as no status
		}
		into[name] = p
	}
	return nil
}

// status is Input.Status.
func (sr *statusReader) status(name string) *fleetv1.AgentStatus {
	if p, ok := sr.v.parsed[name]; ok && p.heartbeat.Equal(sr.v.fleet[name].LastHeartbeat) {
		return p.status
	}
	if err := sr.read([]string{name}, sr.v.parsed); err != nil {
		sr.err = err
		return nil
	}
	return sr.v.parsed[name].status
}

// applied brings v up to the rollout the engine just wrote: next, after step.
func (e *Engine) applied(v *view, step store.RolloutStep, next store.Rollout) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if v.version != step.Rollout.Version {
		v.version = 0
		return
	}
	byName := make(map[string]int, len(v.rows))
	rows := slices.Clone(v.rows)
	for i, c := range rows {
		byName[c.Cluster] = i
	}
	removed := map[string]bool{}
	for _, name := range step.Remove {
		removed[name] = true
	}
	added := false
	for _, c := range step.Clusters {
		if i, ok := byName[c.Cluster]; ok {
			rows[i] = c
			continue
		}
		rows = append(rows, c)
		added = true
	}
	if len(removed) > 0 {
		rows = slices.DeleteFunc(rows, func(c store.RolloutCluster) bool { return removed[c.Cluster] })
	}
	if added {
		slices.SortFunc(rows, func(a, b store.RolloutCluster) int { return strings.Compare(a.Cluster, b.Cluster) })
	}
	v.rows, v.version = rows, next.Version
}

// stale makes the next pass read v's rows again (a write failed or lost its race).
func (e *Engine) stale(v *view) {
	e.mu.Lock()
	v.version = 0
	e.mu.Unlock()
}

// forget drops the views of rollouts that are no longer active.
func (e *Engine) forget(active []store.Rollout) {
	keep := make(map[int64]bool, len(active))
	for _, r := range active {
		keep[r.ID] = true
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for id := range e.views {
		if !keep[id] {
			delete(e.views, id)
		}
	}
}

// cachedRows returns a copy of the rows a view holds for rollout version version, if any.
func (e *Engine) cachedRows(id, version int64) ([]store.RolloutCluster, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	v := e.views[id]
	if v == nil || v.version != version || version == 0 {
		return nil, false
	}
	return slices.Clone(v.rows), true
}
