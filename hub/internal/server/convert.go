package server

import (
	"encoding/json"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"kollect.dev/hub/internal/auth"
	"kollect.dev/hub/internal/bundle"
	"kollect.dev/hub/internal/labelsel"
	"kollect.dev/hub/internal/store"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// storeError maps store errors to Connect codes, keeping the message.
func storeError(err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrClusterExists):
		return connect.NewError(connect.CodeAlreadyExists, err)
	case errors.Is(err, store.ErrTokenInvalid):
		return connect.NewError(connect.CodeUnauthenticated, err)
	}
	return connect.NewError(connect.CodeInternal, err)
}

func invalid(format string, args ...any) error {
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(format, args...))
}

func revisionToProto(r store.Revision) (*fleetv1.BundleRevision, error) {
	sel, err := labelsel.Decode(r.Selector)
	if err != nil {
		return nil, err
	}
	var refs []bundle.ObjectRef
	if err := json.Unmarshal([]byte(r.Objects), &refs); err != nil {
		return nil, fmt.Errorf("decoding objects of %s@%d: %w", r.Bundle, r.Revision, err)
	}
	out := &fleetv1.BundleRevision{Bundle: r.Bundle, Revision: r.Revision, Manifests: r.Manifests,
		ClusterSelector: labelsel.ToProto(sel), Digest: r.Digest, CreatedBy: r.CreatedBy, Message: r.Message}
	if !r.CreatedAt.IsZero() {
		out.CreatedAt = timestamppb.New(r.CreatedAt)
	}
	for _, o := range refs {
		out.Objects = append(out.Objects, &fleetv1.ObjectRef{ApiVersion: o.APIVersion, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name})
	}
	return out, nil
}

func bootstrapTokenToProto(t store.BootstrapToken) *fleetv1.BootstrapToken {
	return &fleetv1.BootstrapToken{Id: t.ID, Description: t.Description, ExpiresAt: timestamppb.New(t.ExpiresAt),
		MaxUses: t.MaxUses, Uses: t.Uses, Revoked: t.Revoked, AllowReplace: t.AllowReplace, CreatedBy: t.CreatedBy,
		CreatedAt: timestamppb.New(t.CreatedAt), ClusterName: t.ClusterName, Labels: t.Labels, RequireApproval: t.RequireApproval}
}

func apiTokenToProto(t store.APIToken) *fleetv1.APIToken {
	out := &fleetv1.APIToken{Id: t.ID, Name: t.Name, Role: auth.RoleToProto(t.Role), Revoked: t.Revoked,
		CreatedBy: t.CreatedBy, CreatedAt: timestamppb.New(t.CreatedAt)}
	if !t.ExpiresAt.IsZero() {
		out.ExpiresAt = timestamppb.New(t.ExpiresAt)
	}
	return out
}

func auditToProto(e store.AuditEvent) *fleetv1.AuditEvent {
	return &fleetv1.AuditEvent{Id: e.ID, Time: timestamppb.New(e.Time), Actor: e.Actor, Action: e.Action,
		Target: e.Target, Detail: e.Detail}
}

// stateNames spell cluster states in the heartbeat history's rows.
var stateNames = map[fleetv1.ClusterState]string{
	fleetv1.ClusterState_CLUSTER_STATE_PENDING: "pending",
	fleetv1.ClusterState_CLUSTER_STATE_ONLINE:  "online",
	fleetv1.ClusterState_CLUSTER_STATE_STALE:   "stale",
	fleetv1.ClusterState_CLUSTER_STATE_OFFLINE: "offline",
	fleetv1.ClusterState_CLUSTER_STATE_REVOKED: "revoked",
}

func heartbeatToProto(r store.HeartbeatRecord) *fleetv1.HeartbeatRecord {
	out := &fleetv1.HeartbeatRecord{Time: timestamppb.New(r.At), AgentVersion: r.AgentVersion,
		AppliedConfigDigest: r.AppliedDigest, Inventories: r.Inventories, Items: r.Items,
		InventoriesNotReady: r.InventoriesNotReady, SinkErrors: r.SinkErrors}
	for state, name := range stateNames {
		if name == r.State {
			out.State = state
		}
	}
	return out
}
