package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"kollect.dev/hub/internal/auth"
	"kollect.dev/hub/internal/labelsel"
	"kollect.dev/hub/internal/store"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"
)

// fleetService implements FleetService. Authorisation and auditing happen in auth.FleetAuth;
// handlers only record what they changed with auth.Note.
type fleetService struct{ s *Server }

var _ fleetv1connect.FleetServiceHandler = (*fleetService)(nil)

func actor(ctx context.Context) string {
	p, _ := auth.PrincipalFrom(ctx)
	return p.Actor()
}

// ListClusters implements FleetService.
func (f *fleetService) ListClusters(ctx context.Context, req *connect.Request[fleetv1.ListClustersRequest]) (*connect.Response[fleetv1.ListClustersResponse], error) {
	sel := labels.Everything()
	if q := req.Msg.GetLabelSelector(); q != "" {
		var err error
		if sel, err = labelsel.ParseQuery(q); err != nil {
			return nil, invalid("%v", err)
		}
	}
	snap, err := f.s.view.Snapshot(ctx)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	out := &fleetv1.ListClustersResponse{}
	for _, c := range snap.Clusters {
		if sel.Matches(labels.Set(c.GetLabels())) {
			out.Clusters = append(out.Clusters, c)
		}
	}
	return connect.NewResponse(out), nil
}

// GetCluster implements FleetService.
func (f *fleetService) GetCluster(ctx context.Context, req *connect.Request[fleetv1.GetClusterRequest]) (*connect.Response[fleetv1.GetClusterResponse], error) {
	snap, err := f.s.view.Snapshot(ctx)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	for _, c := range snap.Clusters {
		if c.GetName() == req.Msg.GetName() {
			return connect.NewResponse(&fleetv1.GetClusterResponse{Cluster: c, Status: snap.Statuses[c.GetName()]}), nil
		}
	}
	return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("cluster %q: %w", req.Msg.GetName(), store.ErrNotFound))
}

// ListHeartbeats implements FleetService.
func (f *fleetService) ListHeartbeats(ctx context.Context, req *connect.Request[fleetv1.ListHeartbeatsRequest]) (*connect.Response[fleetv1.ListHeartbeatsResponse], error) {
	if req.Msg.GetCluster() == "" {
		return nil, invalid("cluster is required")
	}
	limit := int(req.Msg.GetLimit())
	if limit <= 0 || limit > store.HistoryLimit {
		limit = store.HistoryLimit
	}
	records, err := f.s.store.Heartbeats(ctx, req.Msg.GetCluster(), limit)
	if err != nil {
		return nil, storeError(err)
	}
	out := &fleetv1.ListHeartbeatsResponse{}
	for _, r := range records {
		out.Heartbeats = append(out.Heartbeats, heartbeatToProto(r))
	}
	return connect.NewResponse(out), nil
}

// WhoAmI implements FleetService.
func (f *fleetService) WhoAmI(ctx context.Context, _ *connect.Request[fleetv1.WhoAmIRequest]) (*connect.Response[fleetv1.WhoAmIResponse], error) {
	p, ok := auth.PrincipalFrom(ctx)
	if !ok {
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("no API token"))
	}
	return connect.NewResponse(&fleetv1.WhoAmIResponse{Name: p.Name, Role: auth.RoleToProto(p.Role)}), nil
}

// RevokeAgent implements FleetService.
func (f *fleetService) RevokeAgent(ctx context.Context, req *connect.Request[fleetv1.RevokeAgentRequest]) (*connect.Response[fleetv1.RevokeAgentResponse], error) {
	name := req.Msg.GetClusterName()
	if err := f.s.store.RevokeCluster(ctx, name); err != nil {
		return nil, storeError(err)
	}
	f.s.dropAgent(name, fmt.Errorf("agent of cluster %s was revoked", name))
	auth.Note(ctx, "cluster/"+name, "agent credential revoked")
	f.s.log.InfoContext(ctx, "agent revoked", "cluster", name, "by", actor(ctx))
	return connect.NewResponse(&fleetv1.RevokeAgentResponse{}), nil
}

// ReleaseCluster implements FleetService.
func (f *fleetService) ReleaseCluster(ctx context.Context, req *connect.Request[fleetv1.ReleaseClusterRequest]) (*connect.Response[fleetv1.ReleaseClusterResponse], error) {
	name := req.Msg.GetClusterName()
	err := f.s.store.ReleaseCluster(ctx, name)
	if errors.Is(err, store.ErrConflict) {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("cluster %s is not revoked: only a revoked name can be released", name))
	}
	if err != nil {
		return nil, storeError(err)
	}
	f.s.watcher.Poke()
	auth.Note(ctx, "cluster/"+name, "revoked name released: the next agent registering it with a valid bootstrap token takes it")
	f.s.log.InfoContext(ctx, "revoked cluster name released", "cluster", name, "by", actor(ctx))
	return connect.NewResponse(&fleetv1.ReleaseClusterResponse{}), nil
}

// SetClusterLabels implements FleetService.
func (f *fleetService) SetClusterLabels(ctx context.Context, req *connect.Request[fleetv1.SetClusterLabelsRequest]) (*connect.Response[fleetv1.SetClusterLabelsResponse], error) {
	name := req.Msg.GetClusterName()
	if err := labelsel.ValidateLabels(req.Msg.GetLabels()); err != nil {
		return nil, invalid("labels: %v", err)
	}
	if err := f.s.store.SetClusterLabels(ctx, name, req.Msg.GetLabels(), labelsel.Match); err != nil {
		return nil, storeError(err)
	}
	f.s.dispatcher.Kick()
	f.s.watcher.Poke()
	f.s.rollouts.Wake() // a relabelled cluster may join a rollout
	auth.Note(ctx, "cluster/"+name, fmt.Sprintf("labels=%v", req.Msg.GetLabels()))
	snap, err := f.s.view.Snapshot(ctx)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	out := &fleetv1.SetClusterLabelsResponse{}
	for _, c := range snap.Clusters {
		if c.GetName() == name {
			out.Cluster = c
		}
	}
	return connect.NewResponse(out), nil
}

// DeleteCluster implements FleetService.
func (f *fleetService) DeleteCluster(ctx context.Context, req *connect.Request[fleetv1.DeleteClusterRequest]) (*connect.Response[fleetv1.DeleteClusterResponse], error) {
	name := req.Msg.GetClusterName()
	if err := f.s.store.DeleteCluster(ctx, name); err != nil {
		return nil, storeError(err)
	}
	f.s.dispatcher.Disconnect(name, connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("cluster %s was deleted from the fleet", name)))
	f.s.watcher.Poke()
	auth.Note(ctx, "cluster/"+name, "deleted")
	f.s.log.InfoContext(ctx, "cluster deleted", "cluster", name, "by", actor(ctx))
	return connect.NewResponse(&fleetv1.DeleteClusterResponse{}), nil
}

// GetFleetHealth implements FleetService.
func (f *fleetService) GetFleetHealth(ctx context.Context, _ *connect.Request[fleetv1.GetFleetHealthRequest]) (*connect.Response[fleetv1.GetFleetHealthResponse], error) {
	snap, err := f.s.view.Snapshot(ctx)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	return connect.NewResponse(snap.Summary()), nil
}

// WatchFleet implements FleetService.
func (f *fleetService) WatchFleet(ctx context.Context, _ *connect.Request[fleetv1.WatchFleetRequest], stream *connect.ServerStream[fleetv1.WatchFleetResponse]) error {
	sub, leave := f.s.watcher.Subscribe()
	defer leave()
	// The full listing first; changes published meanwhile are sent again after it, which is
	// harmless because every event carries the complete new state.
	snap, err := f.s.view.Snapshot(ctx)
	if err != nil {
		return connect.NewError(connect.CodeInternal, err)
	}
	bundles, err := f.s.listBundles(ctx)
	if err != nil {
		return connect.NewError(connect.CodeInternal, err)
	}
	now := timestamppb.Now()
	for _, c := range snap.Clusters {
		if err := stream.Send(&fleetv1.WatchFleetResponse{Event: &fleetv1.WatchFleetResponse_Cluster{Cluster: c}, Time: now}); err != nil {
			return err
		}
	}
	for _, b := range bundles {
		if err := stream.Send(&fleetv1.WatchFleetResponse{Event: &fleetv1.WatchFleetResponse_Bundle{Bundle: b}, Time: now}); err != nil {
			return err
		}
	}
	active, err := f.s.activeRollouts(ctx)
	if err != nil {
		return connect.NewError(connect.CodeInternal, err)
	}
	for _, r := range active {
		if err := stream.Send(&fleetv1.WatchFleetResponse{Event: &fleetv1.WatchFleetResponse_Rollout{Rollout: r}, Time: now}); err != nil {
			return err
		}
	}
	f.s.watcher.Poke()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-sub.C:
			if !ok {
				return connect.NewError(connect.CodeResourceExhausted, errors.New("too slow to follow fleet changes; reconnect"))
			}
			if err := stream.Send(ev); err != nil {
				return err
			}
		}
	}
}

// ListAuditEvents implements FleetService.
func (f *fleetService) ListAuditEvents(ctx context.Context, req *connect.Request[fleetv1.ListAuditEventsRequest]) (*connect.Response[fleetv1.ListAuditEventsResponse], error) {
	limit := int(req.Msg.GetLimit())
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 1000)
	events, err := f.s.store.ListAudit(ctx, req.Msg.GetBeforeId(), limit)
	if err != nil {
		return nil, storeError(err)
	}
	out := &fleetv1.ListAuditEventsResponse{}
	for _, e := range events {
		out.Events = append(out.Events, auditToProto(e))
	}
	return connect.NewResponse(out), nil
}

// CreateBootstrapToken implements FleetService.
func (f *fleetService) CreateBootstrapToken(ctx context.Context, req *connect.Request[fleetv1.CreateBootstrapTokenRequest]) (*connect.Response[fleetv1.CreateBootstrapTokenResponse], error) {
	// One registration within a day unless asked for more, and never beyond the hub's
	// ceilings: a token left in a shell history or a CI log is worth little.
	ttl := 24 * time.Hour
	if req.Msg.GetTtl() != nil {
		ttl = req.Msg.GetTtl().AsDuration()
	}
	if ttl <= 0 {
		return nil, invalid("ttl must be positive")
	}
	if ttl > f.s.cfg.BootstrapMaxTTL {
		return nil, invalid("ttl %s is longer than this hub allows (%s, --bootstrap-token-max-ttl)", ttl, f.s.cfg.BootstrapMaxTTL)
	}
	uses := req.Msg.GetMaxUses()
	if uses < 0 {
		return nil, invalid("max_uses must not be negative")
	}
	if uses == 0 {
		uses = 1
	}
	if limit := f.s.cfg.BootstrapMaxUses; limit > 0 && uses > limit {
		return nil, invalid("max_uses %d is more than this hub allows (%d, --bootstrap-token-max-uses)", uses, limit)
	}
	// A binding is checked as a registration would check the name and labels, so that a token
	// that could never register anything is refused now.
	if name := req.Msg.GetClusterName(); name != "" {
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			return nil, invalid("cluster_name %q: %s", name, strings.Join(errs, ", "))
		}
	}
	if err := labelsel.ValidateLabels(req.Msg.GetLabels()); err != nil {
		return nil, invalid("labels: %v", err)
	}
	secret, hash, err := auth.NewSecret(auth.PrefixBootstrap)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	id, err := auth.NewID()
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	now := f.s.cfg.Now()
	t := store.BootstrapToken{ID: id, Hash: hash, Description: req.Msg.GetDescription(), ExpiresAt: now.Add(ttl),
		MaxUses: uses, AllowReplace: req.Msg.GetAllowReplace(), CreatedBy: actor(ctx), CreatedAt: now,
		ClusterName: req.Msg.GetClusterName(), Labels: req.Msg.GetLabels(), RequireApproval: req.Msg.GetRequireApproval()}
	if err := f.s.store.CreateBootstrapToken(ctx, t); err != nil {
		return nil, storeError(err)
	}
	auth.Note(ctx, "bootstraptoken/"+id, fmt.Sprintf("ttl=%s max_uses=%d allow_replace=%v cluster_name=%q labels=%v require_approval=%v",
		ttl, t.MaxUses, t.AllowReplace, t.ClusterName, t.Labels, t.RequireApproval))
	return connect.NewResponse(&fleetv1.CreateBootstrapTokenResponse{Token: bootstrapTokenToProto(t), Secret: secret}), nil
}

// ListBootstrapTokens implements FleetService.
func (f *fleetService) ListBootstrapTokens(ctx context.Context, _ *connect.Request[fleetv1.ListBootstrapTokensRequest]) (*connect.Response[fleetv1.ListBootstrapTokensResponse], error) {
	toks, err := f.s.store.ListBootstrapTokens(ctx)
	if err != nil {
		return nil, storeError(err)
	}
	out := &fleetv1.ListBootstrapTokensResponse{}
	for _, t := range toks {
		out.Tokens = append(out.Tokens, bootstrapTokenToProto(t))
	}
	return connect.NewResponse(out), nil
}

// RevokeBootstrapToken implements FleetService.
func (f *fleetService) RevokeBootstrapToken(ctx context.Context, req *connect.Request[fleetv1.RevokeBootstrapTokenRequest]) (*connect.Response[fleetv1.RevokeBootstrapTokenResponse], error) {
	if err := f.s.store.RevokeBootstrapToken(ctx, req.Msg.GetId()); err != nil {
		return nil, storeError(err)
	}
	auth.Note(ctx, "bootstraptoken/"+req.Msg.GetId(), "revoked")
	return connect.NewResponse(&fleetv1.RevokeBootstrapTokenResponse{}), nil
}

// CreateAPIToken implements FleetService.
func (f *fleetService) CreateAPIToken(ctx context.Context, req *connect.Request[fleetv1.CreateAPITokenRequest]) (*connect.Response[fleetv1.CreateAPITokenResponse], error) {
	if req.Msg.GetName() == "" {
		return nil, invalid("name is required")
	}
	role, ok := auth.RoleFromProto(req.Msg.GetRole())
	if !ok {
		return nil, invalid("role must be viewer, operator or admin")
	}
	secret, hash, err := auth.NewSecret(auth.PrefixAPI)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	id, err := auth.NewID()
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	now := f.s.cfg.Now()
	t := store.APIToken{ID: id, Name: req.Msg.GetName(), Hash: hash, Role: role, CreatedBy: actor(ctx), CreatedAt: now}
	expiry := "never"
	if req.Msg.GetTtl() != nil {
		ttl := req.Msg.GetTtl().AsDuration()
		if ttl <= 0 {
			return nil, invalid("ttl must be positive (leave it unset for a token that works until revoked)")
		}
		t.ExpiresAt = now.Add(ttl)
		expiry = t.ExpiresAt.UTC().Format(time.RFC3339)
	}
	if err := f.s.store.CreateAPIToken(ctx, t); err != nil {
		return nil, storeError(err)
	}
	auth.Note(ctx, "apitoken/"+id, fmt.Sprintf("name=%s role=%s expires=%s", t.Name, auth.RoleName(role), expiry))
	return connect.NewResponse(&fleetv1.CreateAPITokenResponse{Token: apiTokenToProto(t), Secret: secret}), nil
}

// ListAPITokens implements FleetService.
func (f *fleetService) ListAPITokens(ctx context.Context, _ *connect.Request[fleetv1.ListAPITokensRequest]) (*connect.Response[fleetv1.ListAPITokensResponse], error) {
	toks, err := f.s.store.ListAPITokens(ctx)
	if err != nil {
		return nil, storeError(err)
	}
	out := &fleetv1.ListAPITokensResponse{}
	for _, t := range toks {
		out.Tokens = append(out.Tokens, apiTokenToProto(t))
	}
	return connect.NewResponse(out), nil
}

// RevokeAPIToken implements FleetService.
func (f *fleetService) RevokeAPIToken(ctx context.Context, req *connect.Request[fleetv1.RevokeAPITokenRequest]) (*connect.Response[fleetv1.RevokeAPITokenResponse], error) {
	if p, _ := auth.PrincipalFrom(ctx); p.TokenID == req.Msg.GetId() {
		// Locking oneself out, possibly as the last admin, is never what was meant.
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("a token cannot revoke itself"))
	}
	if err := f.s.store.RevokeAPIToken(ctx, req.Msg.GetId()); err != nil {
		return nil, storeError(err)
	}
	auth.Note(ctx, "apitoken/"+req.Msg.GetId(), "revoked")
	return connect.NewResponse(&fleetv1.RevokeAPITokenResponse{}), nil
}
