package server

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"kollect.dev/hub/internal/auth"
	"kollect.dev/hub/internal/rollout"
	"kollect.dev/hub/internal/store"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// rolloutError maps the engine's and the store's errors to Connect codes.
func rolloutError(err error) error {
	var active *store.ActiveRolloutError
	switch {
	case errors.As(err, &active):
		return connect.NewError(connect.CodeFailedPrecondition, active)
	case errors.Is(err, rollout.ErrInvalid):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, rollout.ErrPrecondition):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, store.ErrStale):
		return connect.NewError(connect.CodeAborted, err)
	}
	return storeError(err)
}

func rolloutResponse(r store.Rollout, cs []store.RolloutCluster) (*fleetv1.Rollout, error) {
	if cs == nil {
		cs = []store.RolloutCluster{} // GetRollout and StartRollout always carry the clusters
	}
	out, err := rollout.ToProto(r, cs)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	return out, nil
}

func rolloutTarget(r store.Rollout) string { return fmt.Sprintf("rollout/%d", r.ID) }

func rolloutSummary(r store.Rollout) string {
	return fmt.Sprintf("bundle %s %d→%d", r.Bundle, r.FromRevision, r.ToRevision)
}

// StartRollout implements FleetService.
func (f *fleetService) StartRollout(ctx context.Context, req *connect.Request[fleetv1.StartRolloutRequest]) (*connect.Response[fleetv1.StartRolloutResponse], error) {
	m := req.Msg
	if m.GetBundle() == "" {
		return nil, invalid("bundle is required")
	}
	r, cs, err := f.s.rollouts.Start(ctx, rollout.StartParams{Bundle: m.GetBundle(), Revision: m.GetRevision(),
		Strategy: m.GetStrategy(), DryRun: m.GetDryRun(), Actor: actor(ctx)})
	if err != nil {
		return nil, rolloutError(err)
	}
	out, err := rolloutResponse(r, cs)
	if err != nil {
		return nil, err
	}
	if !m.GetDryRun() {
		f.s.watcher.Poke()
		auth.Note(ctx, rolloutTarget(r), fmt.Sprintf("started: %s, %d clusters in %d waves", rolloutSummary(r), len(cs), len(r.Waves)))
		f.s.log.InfoContext(ctx, "rollout started", "id", r.ID, "bundle", r.Bundle, "from", r.FromRevision,
			"to", r.ToRevision, "clusters", len(cs), "by", actor(ctx))
	}
	return connect.NewResponse(&fleetv1.StartRolloutResponse{Rollout: out}), nil
}

// GetRollout implements FleetService.
func (f *fleetService) GetRollout(ctx context.Context, req *connect.Request[fleetv1.GetRolloutRequest]) (*connect.Response[fleetv1.GetRolloutResponse], error) {
	id := req.Msg.GetId()
	if id == 0 {
		if req.Msg.GetBundle() == "" {
			return nil, invalid("give a rollout id or a bundle")
		}
		latest, err := f.s.store.ListRollouts(ctx, store.RolloutFilter{Bundle: req.Msg.GetBundle(), Limit: 1})
		if err != nil {
			return nil, storeError(err)
		}
		if len(latest) == 0 {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("bundle %q has no rollout: %w", req.Msg.GetBundle(), store.ErrNotFound))
		}
		id = latest[0].ID
	}
	r, cs, err := f.s.rollouts.Get(ctx, id)
	if err != nil {
		return nil, rolloutError(err)
	}
	out, err := rolloutResponse(r, cs)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fleetv1.GetRolloutResponse{Rollout: out}), nil
}

// ListRollouts implements FleetService.
func (f *fleetService) ListRollouts(ctx context.Context, req *connect.Request[fleetv1.ListRolloutsRequest]) (*connect.Response[fleetv1.ListRolloutsResponse], error) {
	limit := int(req.Msg.GetLimit())
	if limit <= 0 {
		limit = 50
	}
	list, err := f.s.store.ListRollouts(ctx, store.RolloutFilter{Bundle: req.Msg.GetBundle(),
		ActiveOnly: req.Msg.GetActiveOnly(), Limit: min(limit, 500)})
	if err != nil {
		return nil, storeError(err)
	}
	out := &fleetv1.ListRolloutsResponse{}
	for _, r := range list {
		pr, err := rollout.ToProto(r, nil)
		if err != nil {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
		out.Rollouts = append(out.Rollouts, pr)
	}
	return connect.NewResponse(out), nil
}

// changedRollout answers a pause, resume or abort and records it for the audit log.
func (f *fleetService) changedRollout(ctx context.Context, r store.Rollout, verb string) (*fleetv1.Rollout, error) {
	f.s.watcher.Poke()
	detail := verb + ": " + rolloutSummary(r)
	if r.Message != "" {
		detail += "; " + r.Message
	}
	auth.Note(ctx, rolloutTarget(r), detail)
	f.s.log.InfoContext(ctx, "rollout "+verb, "id", r.ID, "bundle", r.Bundle, "by", actor(ctx))
	_, cs, err := f.s.rollouts.Get(ctx, r.ID)
	if err != nil {
		return nil, storeError(err)
	}
	cur, err := f.s.store.GetRollout(ctx, r.ID) // the engine may have stepped since
	if err != nil {
		return nil, storeError(err)
	}
	return rolloutResponse(cur, cs)
}

// PauseRollout implements FleetService.
func (f *fleetService) PauseRollout(ctx context.Context, req *connect.Request[fleetv1.PauseRolloutRequest]) (*connect.Response[fleetv1.PauseRolloutResponse], error) {
	r, err := f.s.rollouts.Pause(ctx, req.Msg.GetId(), actor(ctx), req.Msg.GetReason())
	if err != nil {
		return nil, rolloutError(err)
	}
	out, err := f.changedRollout(ctx, r, "paused")
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fleetv1.PauseRolloutResponse{Rollout: out}), nil
}

// ResumeRollout implements FleetService.
func (f *fleetService) ResumeRollout(ctx context.Context, req *connect.Request[fleetv1.ResumeRolloutRequest]) (*connect.Response[fleetv1.ResumeRolloutResponse], error) {
	r, err := f.s.rollouts.Resume(ctx, req.Msg.GetId())
	if err != nil {
		return nil, rolloutError(err)
	}
	out, err := f.changedRollout(ctx, r, "resumed")
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fleetv1.ResumeRolloutResponse{Rollout: out}), nil
}

// AbortRollout implements FleetService.
func (f *fleetService) AbortRollout(ctx context.Context, req *connect.Request[fleetv1.AbortRolloutRequest]) (*connect.Response[fleetv1.AbortRolloutResponse], error) {
	r, err := f.s.rollouts.Abort(ctx, req.Msg.GetId(), actor(ctx), req.Msg.GetReason())
	if err != nil {
		return nil, rolloutError(err)
	}
	out, err := f.changedRollout(ctx, r, "aborted")
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fleetv1.AbortRolloutResponse{Rollout: out}), nil
}

// RollbackRollout implements FleetService.
func (f *fleetService) RollbackRollout(ctx context.Context, req *connect.Request[fleetv1.RollbackRolloutRequest]) (*connect.Response[fleetv1.RollbackRolloutResponse], error) {
	r, cs, err := f.s.rollouts.Rollback(ctx, req.Msg.GetId(), req.Msg.GetStrategy(), actor(ctx))
	if err != nil {
		return nil, rolloutError(err)
	}
	out, err := rolloutResponse(r, cs)
	if err != nil {
		return nil, err
	}
	f.s.watcher.Poke()
	auth.Note(ctx, fmt.Sprintf("rollout/%d", req.Msg.GetId()), fmt.Sprintf("rolled back by rollout %d: %s, %d clusters",
		r.ID, rolloutSummary(r), len(cs)))
	f.s.log.InfoContext(ctx, "rollout rolled back", "id", req.Msg.GetId(), "rollback", r.ID, "by", actor(ctx))
	return connect.NewResponse(&fleetv1.RollbackRolloutResponse{Rollout: out}), nil
}

// activeRollouts lists the active rollouts without clusters (WatchFleet's first listing).
func (s *Server) activeRollouts(ctx context.Context) ([]*fleetv1.Rollout, error) {
	return s.protoRollouts(ctx, store.RolloutFilter{ActiveOnly: true})
}

// recentRollouts lists the newest rollouts, active or not, for the fleet watcher: a rollout
// that finished since the last look is among them, so its final state is published.
func (s *Server) recentRollouts(ctx context.Context) ([]*fleetv1.Rollout, error) {
	active, err := s.activeRollouts(ctx)
	if err != nil {
		return nil, err
	}
	recent, err := s.protoRollouts(ctx, store.RolloutFilter{Limit: 50})
	if err != nil {
		return nil, err
	}
	seen := map[int64]bool{}
	for _, r := range active {
		seen[r.GetId()] = true
	}
	for _, r := range recent {
		if !seen[r.GetId()] {
			active = append(active, r)
		}
	}
	return active, nil
}

func (s *Server) protoRollouts(ctx context.Context, f store.RolloutFilter) ([]*fleetv1.Rollout, error) {
	list, err := s.store.ListRollouts(ctx, f)
	if err != nil {
		return nil, err
	}
	out := make([]*fleetv1.Rollout, 0, len(list))
	for _, r := range list {
		pr, err := rollout.ToProto(r, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, pr)
	}
	return out, nil
}
