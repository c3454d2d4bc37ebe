package rollout

import (
	"context"
	"errors"
	"fmt"

	"kollect.dev/hub/internal/labelsel"
	"kollect.dev/hub/internal/store"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// StartParams is a StartRollout request.
type StartParams struct {
	Bundle   string
	Revision int64 // 0: the latest
	Strategy *fleetv1.RolloutStrategy
	DryRun   bool
	Actor    string
}

// Start plans a rollout of a revision over the clusters its selector matches and those that
// hold the bundle, and (unless DryRun) stores it and takes its first step. The rollout moves
// the bundle from its stable revision.
func (e *Engine) Start(ctx context.Context, p StartParams) (store.Rollout, []store.RolloutCluster, error) {
	st, err := Validate(p.Strategy)
	if err != nil {
		return store.Rollout{}, nil, err
	}
	b, err := e.store.GetBundle(ctx, p.Bundle)
	if err != nil {
		return store.Rollout{}, nil, err
	}
	if b.ActiveRolloutID != 0 {
		return store.Rollout{}, nil, &store.ActiveRolloutError{Bundle: b.Name, RolloutID: b.ActiveRolloutID}
	}
	rev, err := e.store.GetRevision(ctx, p.Bundle, p.Revision)
	if err != nil {
		return store.Rollout{}, nil, err
	}
	target, err := StoredMatcher(rev.Selector)
	if err != nil {
		return store.Rollout{}, nil, err
	}
	fleet, err := e.members(ctx, p.Bundle)
	if err != nil {
		return store.Rollout{}, nil, err
	}
	var members []Member
	settled := rev.Revision == b.StableRevision
	for name, c := range fleet {
		if c.Revoked {
			continue
		}
		held, match := c.Desired, target(c.Labels)
		if match || held != 0 {
			members = append(members, Member{Name: name, Labels: c.Labels})
		}
		if (match && held != rev.Revision) || (!match && held != 0) {
			settled = false
		}
	}
	if settled {
		return store.Rollout{}, nil, fmt.Errorf("bundle %s revision %d is already the stable revision on every cluster: %w",
			p.Bundle, rev.Revision, ErrPrecondition)
	}
	waves, clusters, err := Plan(st, members)
	if err != nil {
		return store.Rollout{}, nil, err
	}
	raw, err := EncodeStrategy(st)
	if err != nil {
		return store.Rollout{}, nil, err
	}
	now := e.clock()
	r := store.Rollout{Bundle: p.Bundle, FromRevision: b.StableRevision, ToRevision: rev.Revision, Strategy: raw,
		Phase: store.PhaseProgressing, Waves: waves, CreatedBy: p.Actor, CreatedAt: now, UpdatedAt: now}
	if p.DryRun {
		return r, clusters, nil
	}
	r, err = e.store.CreateRollout(ctx, r, clusters, nil)
	if err != nil {
		return store.Rollout{}, nil, err
	}
	e.advanceOne(ctx, r.ID)
	e.changed(false)
	return e.Get(ctx, r.ID)
}

// Get returns a rollout with its clusters: those the engine holds for the rollout's version
// when it follows the rollout (a client polling an active rollout then costs one row read).
func (e *Engine) Get(ctx context.Context, id int64) (store.Rollout, []store.RolloutCluster, error) {
	r, err := e.store.GetRollout(ctx, id)
	if err != nil {
		return r, nil, err
	}
	if cs, ok := e.cachedRows(id, r.Version); ok {
		return r, cs, nil
	}
	cs, err := e.store.RolloutClusters(ctx, id)
	return r, cs, err
}

// maxAttempts bounds compare-and-swap retries of a user action racing the engine.
const maxAttempts = 10

// update applies fn to the stored rollout and writes it, retrying when the engine (or another
// replica) wrote in between.
func (e *Engine) update(ctx context.Context, id int64, fn func(r *store.Rollout, st *fleetv1.RolloutStrategy) error) (store.Rollout, error) {
	for range maxAttempts {
		r, err := e.store.GetRollout(ctx, id)
		if err != nil {
			return r, err
		}
		st, err := DecodeStrategy(r.Strategy)
		if err != nil {
			return r, err
		}
		if err := fn(&r, st); err != nil {
			return r, err
		}
		r.UpdatedAt = e.clock()
		next, err := e.store.ApplyRolloutStep(ctx, store.RolloutStep{Rollout: r}, labelsel.Match)
		if errors.Is(err, store.ErrStale) {
			continue
		}
		if err != nil {
			return r, err
		}
		e.advanceOne(ctx, id)
		e.changed(false)
		return next, nil
	}
	return store.Rollout{}, fmt.Errorf("rollout %d kept changing; try again: %w", id, store.ErrStale)
}

func inactive(r *store.Rollout) error {
	return fmt.Errorf("rollout %d is %s: %w", r.ID, r.Phase, ErrPrecondition)
}

// Pause stops moving clusters. Pausing a paused rollout changes nothing.
func (e *Engine) Pause(ctx context.Context, id int64, actor, reason string) (store.Rollout, error) {
	return e.update(ctx, id, func(r *store.Rollout, _ *fleetv1.RolloutStrategy) error {
		if !r.Phase.Active() {
			return inactive(r)
		}
		r.Phase, r.Message = store.PhasePaused, "paused by "+actor
		if reason != "" {
			r.Message += ": " + reason
		}
		return nil
	})
}

// Resume resumes a paused rollout or approves the next wave. The running waves' deadlines
// start again from now: time spent paused does not count.
func (e *Engine) Resume(ctx context.Context, id int64) (store.Rollout, error) {
	return e.update(ctx, id, func(r *store.Rollout, st *fleetv1.RolloutStrategy) error {
		if !r.Phase.Active() {
			return inactive(r)
		}
		r.Phase, r.Message = store.PhaseProgressing, ""
		r.Waves = append([]store.RolloutWave(nil), r.Waves...)
		for i := range r.Waves {
			if w := &r.Waves[i]; !w.StartedAt.IsZero() && w.CompletedAt.IsZero() {
				w.DeadlineAt = e.clock().Add(st.GetProgressDeadline().AsDuration())
			}
		}
		return nil
	})
}

// Abort stops a rollout for good; moved clusters keep the target revision.
func (e *Engine) Abort(ctx context.Context, id int64, actor, reason string) (store.Rollout, error) {
	return e.update(ctx, id, func(r *store.Rollout, _ *fleetv1.RolloutStrategy) error {
		if !r.Phase.Active() {
			return inactive(r)
		}
		r.Phase, r.Message, r.FinishedAt = store.PhaseAborted, "aborted by "+actor, e.clock()
		if reason != "" {
			r.Message += ": " + reason
		}
		return nil
	})
}

// Rollback starts a rollout back to id's from_revision over the clusters id moved, and ends
// id as superseded, in one transaction.
func (e *Engine) Rollback(ctx context.Context, id int64, strategy *fleetv1.RolloutStrategy, actor string) (store.Rollout, []store.RolloutCluster, error) {
	if strategy == nil {
		strategy = RollbackStrategy()
	}
	st, err := Validate(strategy)
	if err != nil {
		return store.Rollout{}, nil, err
	}
	raw, err := EncodeStrategy(st)
	if err != nil {
		return store.Rollout{}, nil, err
	}
	for range maxAttempts {
		old, cs, err := e.Get(ctx, id)
		if err != nil {
			return store.Rollout{}, nil, err
		}
		if old.Phase == store.PhaseSuperseded {
			return store.Rollout{}, nil, fmt.Errorf("rollout %d was already rolled back: %w", id, ErrPrecondition)
		}
		if old.FromRevision == 0 {
			return store.Rollout{}, nil, fmt.Errorf("rollout %d released the bundle's first revision; there is no "+
				"earlier revision to roll back to (delete the bundle instead): %w", id, ErrPrecondition)
		}
		fleet, err := e.members(ctx, old.Bundle)
		if err != nil {
			return store.Rollout{}, nil, err
		}
		var members []Member
		for _, c := range cs {
			if cl, ok := fleet[c.Cluster]; ok && !c.MovedAt.IsZero() && !cl.Revoked {
				members = append(members, Member{Name: c.Cluster, Labels: cl.Labels})
			}
		}
		if len(members) == 0 {
			return store.Rollout{}, nil, fmt.Errorf("rollout %d moved no cluster; nothing to roll back: %w", id, ErrPrecondition)
		}
		waves, clusters, err := Plan(st, members)
		if err != nil {
			return store.Rollout{}, nil, err
		}
		now := e.clock()
		next := store.Rollout{Bundle: old.Bundle, FromRevision: old.ToRevision, ToRevision: old.FromRevision, Strategy: raw,
			Phase: store.PhaseProgressing, Waves: waves, RollbackOf: old.ID, CreatedBy: actor, CreatedAt: now, UpdatedAt: now}
		superseded := old
		superseded.Phase, superseded.Message, superseded.UpdatedAt = store.PhaseSuperseded, "rolled back by "+actor, now
		if superseded.FinishedAt.IsZero() {
			superseded.FinishedAt = now
		}
		created, err := e.store.CreateRollout(ctx, next, clusters, &superseded)
		if errors.Is(err, store.ErrStale) {
			continue
		}
		if err != nil {
			return store.Rollout{}, nil, err
		}
		e.advanceOne(ctx, created.ID)
		e.changed(false)
		return e.Get(ctx, created.ID)
	}
	return store.Rollout{}, nil, fmt.Errorf("rollout %d kept changing; try again: %w", id, store.ErrStale)
}
