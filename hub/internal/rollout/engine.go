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

	// pass serialises evaluations (Run's passes and user actions): they share views.
	pass sync.Mutex

	mu        sync.Mutex
	selectors map[string]string // "bundle@revision" → selector JSON (revisions are immutable)
	// views are what the engine keeps of each active rollout between passes (see view.go).
	views map[int64]*view
}

// parsedStatus is a decoded status and the heartbeat that stored it: a status changes only
// with a heartbeat, so an unchanged heartbeat time means an unchanged status.
type parsedStatus struct {
	heartbeat time.Time
	status    *fleetv1.AgentStatus
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
		wake: make(chan struct{}, 1), selectors: map[string]string{}, views: map[int64]*view{}}
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
			e.forget(nil) // a standby keeps no views: the leader's steps would make them stale
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
	if err != nil {
		return err
	}
	e.forget(active)
	var errs []error
	for _, r := range active {
		if err := e.advance(ctx, r); err != nil {
			errs = append(errs, fmt.Errorf("rollout %d: %w", r.ID, err))
		}
	}
	return errors.Join(errs...)
}

// members reads the whole fleet (no status) with each cluster's desired revision of bundle:
// what a new rollout or a rollback is planned over.
func (e *Engine) members(ctx context.Context, bundle string) (map[string]store.Observed, error) {
	obs, err := e.store.ObserveFleet(ctx, bundle)
	if err != nil {
		return nil, err
	}
	out := make(map[string]store.Observed, len(obs))
	for _, o := range obs {
		out[o.Name] = o
	}
	return out, nil
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

// input assembles Advance's input for one rollout from its view.
func (e *Engine) input(ctx context.Context, r store.Rollout) (Input, *view, *statusReader, error) {
	st, err := DecodeStrategy(r.Strategy)
	if err != nil {
		return Input{}, nil, nil, err
	}
	canary, err := CanaryMatcher(st)
	if err != nil {
		return Input{}, nil, nil, err
	}
	sel, err := e.selector(ctx, r.Bundle, r.ToRevision)
	if err != nil {
		return Input{}, nil, nil, err
	}
	target, err := StoredMatcher(sel)
	if err != nil {
		return Input{}, nil, nil, err
	}
	now := e.clock()
	v, statuses, err := e.observe(ctx, r, now)
	if err != nil {
		return Input{}, nil, nil, err
	}
	return Input{Rollout: r, Strategy: st, Clusters: v.rows, Fleet: v.fleet, Status: statuses.status, Target: target,
		Canary: canary, Now: now}, v, statuses, nil
}

// Evaluations is the number of completed evaluations of an active rollout: passes of Run
// and of a user action, one per rollout, counted once the step they computed (if any) has
// been written. Two values read around an event bound the engine's work after it: once the
// count has grown by two, a whole evaluation started after the event and found what it found
// (kollect_hub_rollout_evaluations_total; what tests prove "nothing moved" with).
func (e *Engine) Evaluations() int64 { return e.evaluations.Load() }

// advance computes and writes one step of r. Losing the compare-and-swap is not an error:
// another replica or a user action got there first, and the next pass sees its result.
func (e *Engine) advance(ctx context.Context, r store.Rollout) error {
	e.pass.Lock()
	defer e.pass.Unlock()
	in, v, statuses, err := e.input(ctx, r)
	if err != nil {
		return err
	}
	step, ok := Advance(in)
	if err := statuses.err; err != nil {
		return err // a status could not be read: decide nothing from its absence
	}
	if !ok {
		e.evaluations.Add(1)
		return nil
	}
	next, err := e.store.ApplyRolloutStep(ctx, step, labelsel.Match)
	if errors.Is(err, store.ErrStale) {
		e.stale(v)
		e.evaluations.Add(1)
		return nil
	}
	if err != nil {
		e.stale(v)
		return err
	}
	e.applied(v, step, next)
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
	if err := e.advance(ctx, r); err != nil && !errors.Is(err, context.Canceled) {
		e.log.WarnContext(ctx, "advancing rollout", "id", id, "error", err)
	}
}

// clock is now at the store's precision (milliseconds), so that times compared after a
// round trip through the store compare as they did before it.
func (e *Engine) clock() time.Time { return e.now().UTC().Truncate(time.Millisecond) }
