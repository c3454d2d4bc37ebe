package rollout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"kollect.dev/hub/internal/health"
	"kollect.dev/hub/internal/labelsel"
	"kollect.dev/hub/internal/store"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// Engine drives rollouts. Every hub replica runs one, and only the one whose Leading says so
// evaluates (the replica holding the store's rollout lease); the store's compare-and-swap
// still makes each step happen once should two ever overlap (a holder that lost its lease
// but has not noticed yet).
type Engine struct {
	store   store.Store
	leading func() bool
	th      health.Thresholds
	now     func() time.Time
	log     *slog.Logger
	// changed is called after a step was written; moved says desired revisions changed.
	changed func(moved bool)
	wake    chan struct{}
	// evaluations counts completed evaluations of an active rollout (see Evaluations).
	evaluations atomic.Int64

	mu        sync.Mutex
	selectors map[string]string // "bundle@revision" → selector JSON (revisions are immutable)
	parsed    map[string]parsedStatus
}

type parsedStatus struct {
	raw    string
	status *fleetv1.AgentStatus
}

// Config configures an Engine.
type Config struct {
	Store      store.Store
	Thresholds health.Thresholds
	Now        func() time.Time
	Log        *slog.Logger
	// Changed is called after the engine wrote a step (moved: desired revisions changed), to
	// wake the configuration dispatcher and fleet watchers.
	Changed func(moved bool)
	// Leading reports whether this replica drives rollouts now; nil means always.
	Leading func() bool
}

// New returns an Engine; call Run to start it.
func New(cfg Config) *Engine {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Changed == nil {
		cfg.Changed = func(bool) {}
	}
	if cfg.Leading == nil {
		cfg.Leading = func() bool { return true }
	}
	return &Engine{store: cfg.Store, leading: cfg.Leading, th: cfg.Thresholds, now: cfg.Now, log: cfg.Log, changed: cfg.Changed,
		wake: make(chan struct{}, 1), selectors: map[string]string{}, parsed: map[string]parsedStatus{}}
}

// Wake asks for a prompt pass (a heartbeat arrived, a cluster registered, a user acted).
func (e *Engine) Wake() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// minGap bounds how often wake-ups trigger a pass: heartbeats of a large fleet arrive in
// bursts, and one pass serves a whole burst.
const minGap = 200 * time.Millisecond

// Run advances every active rollout every interval and on Wake until ctx ends.
func (e *Engine) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	last := time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-e.wake:
			if wait := minGap - time.Since(last); wait > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
			}
		}
		if !e.leading() {
			continue
		}
		last = time.Now()
		if err := e.Tick(ctx); err != nil && !errors.Is(err, context.Canceled) {
			e.log.WarnContext(ctx, "advancing rollouts", "error", err)
		}
	}
}

// Tick advances every active rollout once.
func (e *Engine) Tick(ctx context.Context) error {
	active, err := e.store.ListRollouts(ctx, store.RolloutFilter{ActiveOnly: true})
	if err != nil || len(active) == 0 {
		return err
	}
	fleet, err := e.observe(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range active {
		if err := e.advance(ctx, r, fleet); err != nil {
			errs = append(errs, fmt.Errorf("rollout %d: %w", r.ID, err))
		}
	}
	return errors.Join(errs...)
}

// fleetState is one read of every cluster and every desired revision.
type fleetState struct {
	clusters map[string]store.Cluster
	desired  map[string]map[string]int64 // bundle → cluster → revision
}

func (e *Engine) observe(ctx context.Context) (*fleetState, error) {
	clusters, err := e.store.ListClusters(ctx)
	if err != nil {
		return nil, err
	}
	desired, err := e.store.Desired(ctx, "")
	if err != nil {
		return nil, err
	}
	f := &fleetState{clusters: make(map[string]store.Cluster, len(clusters)), desired: map[string]map[string]int64{}}
	for _, c := range clusters {
		f.clusters[c.Name] = c
	}
	for _, d := range desired {
		if f.desired[d.Bundle] == nil {
			f.desired[d.Bundle] = map[string]int64{}
		}
		f.desired[d.Bundle][d.Cluster] = d.Revision
	}
	return f, nil
}

// observations is the fleet as Advance sees it for one bundle.
func (e *Engine) observations(f *fleetState, bundle string, now time.Time) map[string]Observation {
	out := make(map[string]Observation, len(f.clusters))
	for name, c := range f.clusters {
		st := health.State(c, now, e.th)
		out[name] = Observation{Labels: c.Labels, Live: !c.Revoked, LastHeartbeat: c.LastHeartbeat,
			Offline: st != fleetv1.ClusterState_CLUSTER_STATE_ONLINE, Desired: f.desired[bundle][name]}
	}
	return out
}

// status decodes a cluster's stored status, reusing the last decode while it is unchanged.
func (e *Engine) status(f *fleetState, name string) *fleetv1.AgentStatus {
	c, ok := f.clusters[name]
	if !ok || c.Status == "" {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if p, ok := e.parsed[name]; ok && p.raw == c.Status {
		return p.status
	}
	st := &fleetv1.AgentStatus{}
	if err := protojson.Unmarshal([]byte(c.Status), st); err != nil {
		st = nil // written by the hub from a decoded message: a corrupt row, treated as no status
	}
	e.parsed[name] = parsedStatus{raw: c.Status, status: st}
	return st
}

// selector returns a revision's stored selector.
func (e *Engine) selector(ctx context.Context, bundle string, revision int64) (string, error) {
	key := bundle + "@" + strconv.FormatInt(revision, 10)
	e.mu.Lock()
	sel, ok := e.selectors[key]
	e.mu.Unlock()
	if ok {
		return sel, nil
	}
	rev, err := e.store.GetRevision(ctx, bundle, revision)
	if err != nil {
		return "", err
	}
	e.mu.Lock()
	e.selectors[key] = rev.Selector
	e.mu.Unlock()
	return rev.Selector, nil
}

// input assembles Advance's input for one rollout.
func (e *Engine) input(ctx context.Context, r store.Rollout, f *fleetState) (Input, error) {
	st, err := DecodeStrategy(r.Strategy)
	if err != nil {
		return Input{}, err
	}
	canary, err := CanaryMatcher(st)
	if err != nil {
		return Input{}, err
	}
	sel, err := e.selector(ctx, r.Bundle, r.ToRevision)
	if err != nil {
		return Input{}, err
	}
	target, err := StoredMatcher(sel)
	if err != nil {
		return Input{}, err
	}
	clusters, err := e.store.RolloutClusters(ctx, r.ID)
	if err != nil {
		return Input{}, err
	}
	now := e.clock()
	return Input{Rollout: r, Strategy: st, Clusters: clusters, Fleet: e.observations(f, r.Bundle, now),
		Status: func(name string) *fleetv1.AgentStatus { return e.status(f, name) }, Target: target, Canary: canary,
		Now: now}, nil
}

// Evaluations is the number of completed evaluations of an active rollout: passes of Run
// and of a user action, one per rollout, counted once the step they computed (if any) has
// been written. Two values read around an event bound the engine's work after it: once the
// count has grown by two, a whole evaluation started after the event and found what it found
// (kollect_hub_rollout_evaluations_total; what tests prove "nothing moved" with).
func (e *Engine) Evaluations() int64 { return e.evaluations.Load() }

// advance computes and writes one step of r. Losing the compare-and-swap is not an error:
// another replica or a user action got there first, and the next pass sees its result.
func (e *Engine) advance(ctx context.Context, r store.Rollout, f *fleetState) error {
	in, err := e.input(ctx, r, f)
	if err != nil {
		return err
	}
	step, ok := Advance(in)
	if !ok {
		e.evaluations.Add(1)
		return nil
	}
	next, err := e.store.ApplyRolloutStep(ctx, step, labelsel.Match)
	if errors.Is(err, store.ErrStale) {
		e.evaluations.Add(1)
		return nil
	}
	if err != nil {
		return err
	}
	e.evaluations.Add(1)
	for _, a := range step.Audit {
		e.log.InfoContext(ctx, "rollout", "id", r.ID, "event", a.Action, "detail", a.Detail)
	}
	if next.Phase != r.Phase {
		e.log.InfoContext(ctx, "rollout phase", "id", r.ID, "bundle", r.Bundle, "from", r.Phase, "to", next.Phase)
	}
	e.changed(len(step.Move) > 0 || next.Phase == store.PhaseCompleted)
	return nil
}

// advanceOne runs one pass over a single rollout (after a user action, so that the answer
// already shows its effect). A replica that does not lead leaves it to the one that does, at
// its next pass.
func (e *Engine) advanceOne(ctx context.Context, id int64) {
	if !e.leading() {
		return
	}
	r, err := e.store.GetRollout(ctx, id)
	if err != nil || !r.Phase.Active() {
		return
	}
	f, err := e.observe(ctx)
	if err == nil {
		err = e.advance(ctx, r, f)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		e.log.WarnContext(ctx, "advancing rollout", "id", id, "error", err)
	}
}

// clock is now at the store's precision (milliseconds), so that times compared after a
// round trip through the store compare as they did before it.
func (e *Engine) clock() time.Time { return e.now().UTC().Truncate(time.Millisecond) }
