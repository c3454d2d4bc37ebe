package store

import (
	"errors"
	"time"
)

// ErrRegistrationRejected: an admin rejected this cluster's registration with this bootstrap
// token; the same token cannot register the name again (another token can, once the name is
// released).
var ErrRegistrationRejected = errors.New("the registration of this cluster with this bootstrap token was rejected")

// Approval says whether a registered cluster is part of the fleet yet.
type Approval string

// Approval states. Clusters registered before approvals existed are approved.
const (
	// ApprovalApproved: the cluster gets the bundles that select it.
	ApprovalApproved Approval = "approved"
	// ApprovalPending: registered with a token that requires approval and not decided yet. The
	// store hides its desired revisions (Desired), leaves it out of LiveClusters, ObserveFleet
	// and ObserveClusters, and gives it no revision on CreateRevision, so that nothing reaches
	// its agent and no rollout waits for it.
	ApprovalPending Approval = "pending"
	// ApprovalRejected: an admin rejected the registration; the cluster is revoked.
	ApprovalRejected Approval = "rejected"
)

// Registration is how a cluster's current registration happened; never a secret.
type Registration struct {
	TokenID          string `json:"tokenId,omitempty"`
	TokenDescription string `json:"tokenDescription,omitempty"`
	// TokenCreatedBy is the actor that created the bootstrap token: who handed it out.
	TokenCreatedBy string `json:"tokenCreatedBy,omitempty"`
	// Peer is the address the registration came from, as the hub saw it.
	Peer         string `json:"peer,omitempty"`
	AgentVersion string `json:"agentVersion,omitempty"`
}

// Decision is an admin's approval or rejection of a registration.
type Decision struct {
	Cluster string
	By      string
	At      time.Time
}
