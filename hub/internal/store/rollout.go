package store

import "time"

// RolloutPhase is where a rollout is (fleetv1.RolloutPhase, spelled for the database).
type RolloutPhase string

// Rollout phases. Progressing, paused and awaiting approval are active: a bundle has at most
// one active rollout.
const (
	PhaseProgressing      RolloutPhase = "progressing"
	PhasePaused           RolloutPhase = "paused"
	PhaseAwaitingApproval RolloutPhase = "awaiting_approval"
	PhaseCompleted        RolloutPhase = "completed"
	PhaseAborted          RolloutPhase = "aborted"
	PhaseSuperseded       RolloutPhase = "superseded"
)

// Active reports whether the phase holds the bundle's one active-rollout slot.
func (p RolloutPhase) Active() bool {
	return p == PhaseProgressing || p == PhasePaused || p == PhaseAwaitingApproval
}

// ClusterState is one cluster's progress in a rollout (fleetv1.RolloutClusterState).
type ClusterState string

// Cluster states of a rollout.
const (
	ClusterPending   ClusterState = "pending"
	ClusterApplying  ClusterState = "applying"
	ClusterVerifying ClusterState = "verifying"
	ClusterHealthy   ClusterState = "healthy"
	ClusterFailed    ClusterState = "failed"
)

// Done reports whether the cluster has finished its part of the rollout.
func (s ClusterState) Done() bool { return s == ClusterHealthy || s == ClusterFailed }

// Rollout is one staged move of a bundle from one revision to another. The engine
// (hub/internal/rollout) owns the meaning of its fields; the store keeps them and enforces
// the one-active-rollout rule and the compare-and-swap on Version.
type Rollout struct {
	ID           int64
	Bundle       string
	FromRevision int64
	ToRevision   int64
	// Strategy is the protobuf JSON of fleetv1.RolloutStrategy.
	Strategy    string
	Phase       RolloutPhase
	Message     string
	CurrentWave int
	Waves       []RolloutWave
	RollbackOf  int64
	CreatedBy   string
	CreatedAt   time.Time
	UpdatedAt   time.Time
	FinishedAt  time.Time
	// Version increases with every write; writes compare it (optimistic concurrency).
	Version int64
}

// RolloutWave is one stage of a rollout. The counts are kept with the wave (recomputed by the
// engine on every step) so that listings need not read every cluster.
type RolloutWave struct {
	Name        string    `json:"name"`
	StartedAt   time.Time `json:"startedAt,omitzero"`
	CompletedAt time.Time `json:"completedAt,omitzero"`
	// DeadlineAt is when the wave's unfinished clusters fail: StartedAt + progress_deadline,
	// moved on when a paused rollout resumes.
	DeadlineAt time.Time `json:"deadlineAt,omitzero"`
	Total      int64     `json:"total"`
	Pending    int64     `json:"pending"`
	InProgress int64     `json:"inProgress"`
	Healthy    int64     `json:"healthy"`
	Failed     int64     `json:"failed"`
}

// RolloutCluster is one cluster of a rollout.
type RolloutCluster struct {
	Cluster      string
	Wave         int
	State        ClusterState
	Gate         string
	Message      string
	MovedAt      time.Time
	HealthySince time.Time
	FinishedAt   time.Time
	Baseline     Baseline
}

// Baseline is what a cluster reported before it was moved, for the gates that compare.
type Baseline struct {
	// Observed is false when the cluster had never reported status at move time; the
	// comparing gates are then skipped.
	Observed bool `json:"observed,omitempty"`
	// ItemCounts maps "namespace/name" of each inventory to its item count.
	ItemCounts map[string]int64 `json:"itemCounts,omitempty"`
	// SinkErrors lists "kind/namespace/name" of the sinks already failing.
	SinkErrors []string `json:"sinkErrors,omitempty"`
	// Coverage maps "inventory|target" to the target's coverage state.
	Coverage map[string]string `json:"coverage,omitempty"`
}

// RolloutFilter selects rollouts to list.
type RolloutFilter struct {
	Bundle     string // "" for every bundle
	ActiveOnly bool
	Limit      int // 0: no limit
}

// RolloutStep is one atomic change of a rollout. A step that moves the rollout to
// PhaseCompleted also makes ToRevision the bundle's stable revision and re-assigns every live
// cluster outside the rollout as CreateRevision would (its selector decides), so that a
// cluster registering in the last instant is not left behind. A step leaving the active
// phases sets FinishedAt when the caller did not.
type RolloutStep struct {
	// Rollout is the new state. Its Version must equal the stored version.
	Rollout Rollout
	// Clusters are rows to insert or replace.
	Clusters []RolloutCluster
	// Remove names rows to delete (clusters that left the fleet).
	Remove []string
	// Move names clusters to move: each gets Rollout.ToRevision as its desired revision of
	// the bundle when that revision's selector matches its labels, and loses the bundle
	// otherwise. The config epoch moves so that every replica sends the change.
	Move []string
	// Audit events are written with the step, so that a transition is recorded exactly once
	// however many replicas race for it.
	Audit []AuditEvent
}
