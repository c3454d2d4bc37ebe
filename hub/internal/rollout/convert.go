package rollout

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"kollect.dev/hub/internal/store"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

var phases = map[store.RolloutPhase]fleetv1.RolloutPhase{
	store.PhaseProgressing:      fleetv1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING,
	store.PhasePaused:           fleetv1.RolloutPhase_ROLLOUT_PHASE_PAUSED,
	store.PhaseAwaitingApproval: fleetv1.RolloutPhase_ROLLOUT_PHASE_AWAITING_APPROVAL,
	store.PhaseCompleted:        fleetv1.RolloutPhase_ROLLOUT_PHASE_COMPLETED,
	store.PhaseAborted:          fleetv1.RolloutPhase_ROLLOUT_PHASE_ABORTED,
	store.PhaseSuperseded:       fleetv1.RolloutPhase_ROLLOUT_PHASE_SUPERSEDED,
}

var clusterStates = map[store.ClusterState]fleetv1.RolloutClusterState{
	store.ClusterPending:   fleetv1.RolloutClusterState_ROLLOUT_CLUSTER_STATE_PENDING,
	store.ClusterApplying:  fleetv1.RolloutClusterState_ROLLOUT_CLUSTER_STATE_APPLYING,
	store.ClusterVerifying: fleetv1.RolloutClusterState_ROLLOUT_CLUSTER_STATE_VERIFYING,
	store.ClusterHealthy:   fleetv1.RolloutClusterState_ROLLOUT_CLUSTER_STATE_HEALTHY,
	store.ClusterFailed:    fleetv1.RolloutClusterState_ROLLOUT_CLUSTER_STATE_FAILED,
}

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// ToProto converts a stored rollout; clusters are included when cs is not nil.
func ToProto(r store.Rollout, cs []store.RolloutCluster) (*fleetv1.Rollout, error) {
	st, err := DecodeStrategy(r.Strategy)
	if err != nil {
		return nil, err
	}
	out := &fleetv1.Rollout{Id: r.ID, Bundle: r.Bundle, FromRevision: r.FromRevision, ToRevision: r.ToRevision,
		Strategy: st, Phase: phases[r.Phase], Message: r.Message, CurrentWave: int32(r.CurrentWave),
		RollbackOf: r.RollbackOf, CreatedBy: r.CreatedBy, CreatedAt: ts(r.CreatedAt), UpdatedAt: ts(r.UpdatedAt),
		FinishedAt: ts(r.FinishedAt)}
	for i, w := range r.Waves {
		phase := fleetv1.WavePhase_WAVE_PHASE_PENDING
		switch {
		case !w.CompletedAt.IsZero():
			phase = fleetv1.WavePhase_WAVE_PHASE_COMPLETED
		case !w.StartedAt.IsZero():
			phase = fleetv1.WavePhase_WAVE_PHASE_RUNNING
		}
		out.Waves = append(out.Waves, &fleetv1.RolloutWave{Index: int32(i), Name: w.Name, Phase: phase,
			ClustersTotal: w.Total, ClustersPending: w.Pending, ClustersInProgress: w.InProgress,
			ClustersHealthy: w.Healthy, ClustersFailed: w.Failed, StartedAt: ts(w.StartedAt), CompletedAt: ts(w.CompletedAt)})
	}
	for _, c := range cs {
		out.Clusters = append(out.Clusters, &fleetv1.RolloutCluster{Cluster: c.Cluster, Wave: int32(c.Wave),
			State: clusterStates[c.State], Gate: c.Gate, Message: c.Message, MovedAt: ts(c.MovedAt),
			HealthySince: ts(c.HealthySince), FinishedAt: ts(c.FinishedAt)})
	}
	return out, nil
}
