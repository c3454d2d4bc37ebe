package rollout

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"kollect.dev/hub/internal/store"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// Observation is what the hub knows of one registered cluster now.
type Observation struct {
	Labels map[string]string
	// Live: registered and not revoked.
	Live bool
	// Offline: stale, offline or never heard from (health thresholds).
	Offline       bool
	LastHeartbeat time.Time
	// Desired is the cluster's desired revision of the rollout's bundle; 0 when it does not
	// hold the bundle.
	Desired int64
}

// Input is everything Advance decides from.
type Input struct {
	Rollout  store.Rollout
	Strategy *fleetv1.RolloutStrategy
	Clusters []store.RolloutCluster
	// Fleet holds every registered cluster.
	Fleet map[string]Observation
	// Status returns a cluster's last reported status (nil before its first heartbeat).
	Status func(cluster string) *fleetv1.AgentStatus
	// Target matches the target revision's selector; Canary the canary selector (nil: none).
	Target, Canary Matcher
	Now            time.Time
}

// Actor is the audit actor of the engine's own transitions.
const Actor = "hub"

// Advance computes a rollout's next step from stored state and the fleet as observed now; ok
// is false when nothing changes. It removes clusters that left the fleet, adds joiners,
// judges moved clusters, applies wave deadlines and the failure budget, starts, completes and
// fills waves, and completes the rollout. Only a progressing rollout starts or completes
// waves and enforces deadlines; one awaiting approval still moves joiners of waves that ran,
// and a paused one moves nothing but still follows its moved clusters.
func Advance(in Input) (step store.RolloutStep, ok bool) {
	if !in.Rollout.Phase.Active() {
		return step, false
	}
	a := &advancer{in: in, r: in.Rollout, rows: map[string]*store.RolloutCluster{}, dirty: map[string]bool{}}
	a.r.Waves = append([]store.RolloutWave(nil), in.Rollout.Waves...)
	for _, c := range in.Clusters {
		c := c
		a.rows[c.Cluster] = &c
		a.order = append(a.order, c.Cluster)
	}
	sort.Strings(a.order) // clusters move in name order, whatever order they came in
	a.removeGone()
	a.addJoiners()
	a.judge()
	a.budget()
	switch a.r.Phase {
	case store.PhaseProgressing:
		a.progress()
	case store.PhaseAwaitingApproval:
		a.move() // only joiners of waves that already ran: the next wave waits
	}
	if !a.changed {
		return step, false
	}
	all := make([]store.RolloutCluster, 0, len(a.rows))
	for _, name := range a.order {
		if c, ok := a.rows[name]; ok {
			all = append(all, *c)
		}
	}
	Recount(a.r.Waves, all)
	a.r.UpdatedAt = in.Now
	step.Rollout = a.r
	for _, name := range a.order {
		if a.dirty[name] {
			if c, ok := a.rows[name]; ok {
				step.Clusters = append(step.Clusters, *c)
			}
		}
	}
	step.Remove, step.Move, step.Audit = a.removed, a.moved, a.audit
	return step, true
}

type advancer struct {
	in      Input
	r       store.Rollout
	rows    map[string]*store.RolloutCluster
	order   []string // cluster names, sorted
	dirty   map[string]bool
	removed []string
	moved   []string
	audit   []store.AuditEvent
	failed  []string // clusters that failed in this step
	changed bool
}

func (a *advancer) note(action, detail string) {
	a.audit = append(a.audit, store.AuditEvent{Time: a.in.Now, Actor: Actor, Action: action,
		Target: fmt.Sprintf("rollout/%d", a.r.ID), Detail: fmt.Sprintf("bundle %s %d→%d: %s", a.r.Bundle,
			a.r.FromRevision, a.r.ToRevision, detail)})
	a.changed = true
}

func (a *advancer) touch(name string) {
	a.dirty[name] = true
	a.changed = true
}

// removeGone drops clusters deleted or revoked since they joined the rollout.
func (a *advancer) removeGone() {
	for _, name := range a.order {
		if obs, ok := a.in.Fleet[name]; !ok || !obs.Live {
			delete(a.rows, name)
			a.removed = append(a.removed, name)
			a.changed = true
		}
	}
}

// addJoiners adds live clusters outside the rollout whose desired revision is not what the
// target implies (they registered or were relabelled and got the stable revision).
func (a *advancer) addJoiners() {
	var names []string
	for name, obs := range a.in.Fleet {
		if _, in := a.rows[name]; in || !obs.Live {
			continue
		}
		if match := a.in.Target(obs.Labels); (match && obs.Desired != a.r.ToRevision) || (!match && obs.Desired != 0) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return
	}
	sort.Strings(names)
	if len(a.r.Waves) == 0 {
		a.r.Waves = append(a.r.Waves, store.RolloutWave{Name: "wave 1"})
	}
	for _, name := range names {
		wave := len(a.r.Waves) - 1
		if a.in.Canary != nil && a.r.Waves[0].Name == CanaryWave && a.in.Canary(a.in.Fleet[name].Labels) {
			wave = 0
		}
		a.rows[name] = &store.RolloutCluster{Cluster: name, Wave: wave, State: store.ClusterPending}
		a.order = append(a.order, name)
		a.touch(name)
	}
	sort.Strings(a.order)
}

// deadline is when a cluster's time runs out: its wave's deadline, or for a joiner moved after
// its wave completed, progress_deadline after its move. Zero means none.
func (a *advancer) deadline(c *store.RolloutCluster) time.Time {
	if c.Wave < 0 || c.Wave >= len(a.r.Waves) {
		return time.Time{}
	}
	w := a.r.Waves[c.Wave]
	if !w.CompletedAt.IsZero() {
		if c.MovedAt.IsZero() {
			return time.Time{}
		}
		return c.MovedAt.Add(a.in.Strategy.GetProgressDeadline().AsDuration())
	}
	return w.DeadlineAt
}

// judge evaluates every moved, unfinished cluster.
func (a *advancer) judge() {
	minHealthy := a.in.Strategy.GetMinHealthy().AsDuration()
	for _, name := range a.order {
		c, ok := a.rows[name]
		if !ok || c.State == store.ClusterPending || c.State.Done() {
			continue
		}
		before := *c // Baseline is not changed here
		obs := a.in.Fleet[name]
		var res Result
		switch {
		case obs.Offline:
			res = Result{Verdict: Wait, Applied: c.State == store.ClusterVerifying, Gate: GateOffline,
				Message: "the cluster is not reporting (stale or offline); waiting for it"}
		case !obs.LastHeartbeat.After(c.MovedAt):
			res = Result{Verdict: Wait, Applied: c.State == store.ClusterVerifying, Gate: c.Gate, Message: c.Message}
		default:
			t := Target{Bundle: a.r.Bundle, Revision: a.r.ToRevision, Absent: obs.Desired == 0}
			res = Evaluate(a.in.Strategy.GetGates(), t, c.Baseline, a.in.Status(name))
		}
		switch res.Verdict {
		case Fail:
			a.fail(c, res.Gate, res.Message)
		case Wait:
			c.State = store.ClusterApplying
			if res.Applied {
				c.State = store.ClusterVerifying
			}
			c.Gate, c.Message, c.HealthySince = res.Gate, res.Message, time.Time{}
		case Pass:
			c.State, c.Gate, c.Message = store.ClusterVerifying, "", ""
			if c.HealthySince.IsZero() {
				c.HealthySince = a.in.Now
			}
			if a.in.Now.Sub(c.HealthySince) >= minHealthy {
				c.State, c.FinishedAt = store.ClusterHealthy, a.in.Now
			}
		}
		if dl := a.deadline(c); !c.State.Done() && a.r.Phase == store.PhaseProgressing && !dl.IsZero() && !a.in.Now.Before(dl) {
			gate := GateProgressDeadline
			if obs.Offline {
				gate = GateOffline
			}
			a.fail(c, gate, fmt.Sprintf("not healthy within the progress deadline (%s): %s",
				a.in.Strategy.GetProgressDeadline().AsDuration(), strings.TrimSpace(res.Gate+": "+res.Message)))
		}
		if !sameProgress(*c, before) {
			a.touch(name)
		}
	}
	// Clusters of a running wave that were never moved (max_concurrency) fail at its deadline.
	if a.r.Phase != store.PhaseProgressing {
		return
	}
	for _, name := range a.order {
		c, ok := a.rows[name]
		if !ok || c.State != store.ClusterPending {
			continue
		}
		if dl := a.deadline(c); !dl.IsZero() && !a.in.Now.Before(dl) {
			a.fail(c, GateProgressDeadline, fmt.Sprintf("not moved within the progress deadline (%s)",
				a.in.Strategy.GetProgressDeadline().AsDuration()))
			a.touch(name)
		}
	}
}

func (a *advancer) fail(c *store.RolloutCluster, gate, msg string) {
	c.State, c.Gate, c.Message, c.FinishedAt = store.ClusterFailed, gate, msg, a.in.Now
	a.failed = append(a.failed, c.Cluster)
	a.note("RolloutClusterFailed", fmt.Sprintf("cluster %s failed gate %s: %s", c.Cluster, gate, msg))
}

// budget pauses a progressing rollout when a failure in this step takes the failures past
// max_failures. Only new failures count, so resuming after such a pause goes on.
func (a *advancer) budget() {
	if len(a.failed) == 0 || a.r.Phase != store.PhaseProgressing {
		return
	}
	var failed []string
	for _, name := range a.order {
		if c, ok := a.rows[name]; ok && c.State == store.ClusterFailed {
			failed = append(failed, fmt.Sprintf("%s (%s: %s)", name, c.Gate, c.Message))
		}
	}
	if int32(len(failed)) <= a.in.Strategy.GetMaxFailures() {
		return
	}
	const show = 5
	list := strings.Join(failed[:min(len(failed), show)], "; ")
	if len(failed) > show {
		list += fmt.Sprintf("; and %d more", len(failed)-show)
	}
	a.r.Phase = store.PhasePaused
	a.r.Message = fmt.Sprintf("paused: %d cluster(s) failed, more than max_failures %d: %s", len(failed),
		a.in.Strategy.GetMaxFailures(), list)
	a.note("RolloutPaused", a.r.Message)
}

// progress starts the current wave, moves what may move and completes waves and the rollout.
func (a *advancer) progress() {
	for {
		if len(a.r.Waves) == 0 {
			a.complete()
			return
		}
		cur := a.r.CurrentWave
		w := &a.r.Waves[cur]
		if w.StartedAt.IsZero() {
			w.StartedAt = a.in.Now
			w.DeadlineAt = a.in.Now.Add(a.in.Strategy.GetProgressDeadline().AsDuration())
			a.note("RolloutWaveStarted", fmt.Sprintf("%s started (%d clusters)", w.Name, a.count(cur)))
		}
		a.move()
		if w.CompletedAt.IsZero() {
			if !a.waveDone(cur) {
				return
			}
			w.CompletedAt = a.in.Now
			healthy, failed := a.tally(cur)
			a.note("RolloutWaveCompleted", fmt.Sprintf("%s completed: %d healthy, %d failed", w.Name, healthy, failed))
			if cur < len(a.r.Waves)-1 {
				a.r.CurrentWave++
				if a.in.Strategy.GetRequireApproval() {
					a.r.Phase = store.PhaseAwaitingApproval
					a.r.Message = fmt.Sprintf("%s completed; resume to start %s", w.Name, a.r.Waves[a.r.CurrentWave].Name)
					a.note("RolloutAwaitingApproval", a.r.Message)
					return
				}
				continue
			}
		}
		a.complete() // the last wave is done
		return
	}
}

// complete ends the rollout once every cluster has finished (joiners of earlier waves may
// still be in flight after the last wave).
func (a *advancer) complete() {
	for _, c := range a.rows {
		if !c.State.Done() {
			return
		}
	}
	a.r.Phase, a.r.Message, a.r.FinishedAt = store.PhaseCompleted, "", a.in.Now
	healthy, failed := 0, 0
	for _, c := range a.rows {
		if c.State == store.ClusterHealthy {
			healthy++
		} else {
			failed++
		}
	}
	a.note("RolloutCompleted", fmt.Sprintf("completed: %d healthy, %d failed; revision %d is stable", healthy, failed, a.r.ToRevision))
}

// move moves pending clusters of started waves, at most max_concurrency in flight per wave.
func (a *advancer) move() {
	limit := int(a.in.Strategy.GetMaxConcurrency())
	inFlight := map[int]int{}
	for _, c := range a.rows {
		if c.State == store.ClusterApplying || c.State == store.ClusterVerifying {
			inFlight[c.Wave]++
		}
	}
	for _, name := range a.order {
		c, ok := a.rows[name]
		if !ok || c.State != store.ClusterPending || c.Wave > a.r.CurrentWave || c.Wave >= len(a.r.Waves) ||
			a.r.Waves[c.Wave].StartedAt.IsZero() {
			continue
		}
		if limit > 0 && inFlight[c.Wave] >= limit {
			continue
		}
		inFlight[c.Wave]++
		c.State, c.MovedAt, c.HealthySince = store.ClusterApplying, a.in.Now, time.Time{}
		c.Gate, c.Message = GateApplied, "waiting for the agent's first heartbeat after the move"
		c.Baseline = Baseline(a.in.Status(name))
		a.moved = append(a.moved, name)
		a.touch(name)
	}
}

func (a *advancer) count(wave int) int {
	n := 0
	for _, c := range a.rows {
		if c.Wave == wave {
			n++
		}
	}
	return n
}

func (a *advancer) waveDone(wave int) bool {
	for _, c := range a.rows {
		if c.Wave == wave && !c.State.Done() {
			return false
		}
	}
	return true
}

func (a *advancer) tally(wave int) (healthy, failed int) {
	for _, c := range a.rows {
		if c.Wave != wave {
			continue
		}
		if c.State == store.ClusterHealthy {
			healthy++
		} else if c.State == store.ClusterFailed {
			failed++
		}
	}
	return healthy, failed
}

func sameProgress(x, y store.RolloutCluster) bool {
	return x.State == y.State && x.Gate == y.Gate && x.Message == y.Message && x.HealthySince.Equal(y.HealthySince) &&
		x.FinishedAt.Equal(y.FinishedAt)
}
