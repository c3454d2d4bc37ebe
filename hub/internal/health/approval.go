package health

import (
	"google.golang.org/protobuf/types/known/timestamppb"

	"kollect.dev/hub/internal/store"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// PendingApproval reports whether a cluster waits for an admin to approve its registration:
// it is shown, but counts in no fleet total (config skew, versions, freshness, metrics of
// sync and skew) until approved.
func PendingApproval(c *fleetv1.Cluster) bool {
	return c.GetApproval() == fleetv1.ClusterApproval_CLUSTER_APPROVAL_PENDING
}

func approvalToProto(a store.Approval) fleetv1.ClusterApproval {
	switch a {
	case store.ApprovalPending:
		return fleetv1.ClusterApproval_CLUSTER_APPROVAL_PENDING
	case store.ApprovalRejected:
		return fleetv1.ClusterApproval_CLUSTER_APPROVAL_REJECTED
	}
	return fleetv1.ClusterApproval_CLUSTER_APPROVAL_APPROVED
}

// RegistrationToProto says how c's current registration happened.
func RegistrationToProto(c store.Cluster) *fleetv1.Registration {
	r := c.Registration
	out := &fleetv1.Registration{BootstrapTokenId: r.TokenID, BootstrapTokenDescription: r.TokenDescription,
		BootstrapTokenCreatedBy: r.TokenCreatedBy, PeerAddress: r.Peer, AgentVersion: r.AgentVersion, DecidedBy: c.DecidedBy}
	if !c.DecidedAt.IsZero() {
		out.DecidedAt = timestamppb.New(c.DecidedAt)
	}
	return out
}
