package server

import (
	"context"
	"errors"
	"fmt"
	"net"

	"connectrpc.com/connect"

	"kollect.dev/hub/internal/auth"
	"kollect.dev/hub/internal/health"
	"kollect.dev/hub/internal/labelsel"
	"kollect.dev/hub/internal/store"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// ApproveCluster implements FleetService.
func (f *fleetService) ApproveCluster(ctx context.Context, req *connect.Request[fleetv1.ApproveClusterRequest]) (*connect.Response[fleetv1.ApproveClusterResponse], error) {
	name := req.Msg.GetClusterName()
	c, err := f.s.store.ApproveCluster(ctx, store.Decision{Cluster: name, By: actor(ctx), At: f.s.cfg.Now()}, labelsel.Match)
	if errors.Is(err, store.ErrConflict) {
		return nil, connect.NewError(connect.CodeFailedPrecondition, err)
	}
	if err != nil {
		return nil, storeError(err)
	}
	// Its configuration exists from now on: the snapshot that sends it to the stream the
	// agent already holds, and rollouts it now joins.
	f.s.dispatcher.Kick()
	f.s.rollouts.Wake()
	f.s.watcher.Poke()
	auth.Note(ctx, "cluster/"+name, fmt.Sprintf("registration approved: bootstrap_token=%s peer=%s registered_at=%s",
		c.Registration.TokenID, c.Registration.Peer, c.RegisteredAt.UTC().Format("2006-01-02T15:04:05Z")))
	f.s.log.InfoContext(ctx, "cluster registration approved", "cluster", name, "by", actor(ctx),
		"bootstrapToken", c.Registration.TokenID)
	return connect.NewResponse(&fleetv1.ApproveClusterResponse{}), nil
}

// RejectCluster implements FleetService.
func (f *fleetService) RejectCluster(ctx context.Context, req *connect.Request[fleetv1.RejectClusterRequest]) (*connect.Response[fleetv1.RejectClusterResponse], error) {
	name := req.Msg.GetClusterName()
	c, err := f.s.store.RejectCluster(ctx, store.Decision{Cluster: name, By: actor(ctx), At: f.s.cfg.Now()})
	if errors.Is(err, store.ErrConflict) {
		return nil, connect.NewError(connect.CodeFailedPrecondition, err)
	}
	if err != nil {
		return nil, storeError(err)
	}
	f.s.dropAgent(name, fmt.Errorf("the registration of cluster %s was rejected by an admin", name))
	auth.Note(ctx, "cluster/"+name, fmt.Sprintf("registration rejected, agent credential revoked: bootstrap_token=%s peer=%s was=%s",
		c.Registration.TokenID, c.Registration.Peer, c.Approval))
	f.s.log.InfoContext(ctx, "cluster registration rejected", "cluster", name, "by", actor(ctx),
		"bootstrapToken", c.Registration.TokenID, "peer", c.Registration.Peer)
	c.DecidedBy, c.DecidedAt = actor(ctx), f.s.cfg.Now()
	return connect.NewResponse(&fleetv1.RejectClusterResponse{Registration: health.RegistrationToProto(c)}), nil
}

// dropAgent ends what this replica serves a cluster whose credential was just revoked
// (revocation, rejection): its streams end now rather than at their next check.
func (s *Server) dropAgent(name string, why error) {
	s.dispatcher.Disconnect(name, connect.NewError(connect.CodeUnauthenticated, why))
	s.watcher.Poke()
}

// peerHost is the address a registration is recorded from: the host of host:port, which is
// what an admin recognises (the port is the client's ephemeral one).
func peerHost(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// rejectedRegistration is the refusal of a registration with the bootstrap token of a
// registration an admin rejected.
func rejectedRegistration(name string) error {
	return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("an admin rejected the registration of cluster %s "+
		"with this bootstrap token, which cannot register it again: ask the hub's admin for another token", name))
}
