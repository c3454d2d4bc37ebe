package health

import (
	"sort"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"kollect.dev/hub/internal/store"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// Thresholds are the heartbeat ages at which a cluster turns stale and offline.
type Thresholds struct {
	StaleAfter   time.Duration
	OfflineAfter time.Duration
}

// DefaultThresholds suit the agents' default 15 s heartbeat: two missed beats is stale.
var DefaultThresholds = Thresholds{StaleAfter: 45 * time.Second, OfflineAfter: 5 * time.Minute}

// State is a cluster's liveness at now.
func State(c store.Cluster, now time.Time, th Thresholds) fleetv1.ClusterState {
	switch age := now.Sub(c.LastHeartbeat); {
	case c.Revoked:
		return fleetv1.ClusterState_CLUSTER_STATE_REVOKED
	case c.LastHeartbeat.IsZero():
		return fleetv1.ClusterState_CLUSTER_STATE_PENDING
	case age >= th.OfflineAfter:
		return fleetv1.ClusterState_CLUSTER_STATE_OFFLINE
	case age >= th.StaleAfter:
		return fleetv1.ClusterState_CLUSTER_STATE_STALE
	default:
		return fleetv1.ClusterState_CLUSTER_STATE_ONLINE
	}
}

// Input is what the hub knows about one cluster.
type Input struct {
	Cluster       store.Cluster
	Status        *fleetv1.AgentStatus // nil before the first heartbeat
	Desired       []store.Desired
	DesiredDigest string
}

// Fleet is the derived view of every cluster at one instant.
type Fleet struct {
	Now      time.Time
	Th       Thresholds
	Clusters []*fleetv1.Cluster // sorted by name
	Statuses map[string]*fleetv1.AgentStatus
}

// Build derives every cluster's view. Version skew is measured against the most common agent
// version among live clusters.
func Build(inputs []Input, now time.Time, th Thresholds) *Fleet {
	common := commonVersion(inputs)
	f := &Fleet{Now: now, Th: th, Statuses: map[string]*fleetv1.AgentStatus{}}
	for _, in := range inputs {
		c := in.Cluster
		pc := &fleetv1.Cluster{
			Name: c.Name, Labels: c.Labels, State: State(c, now, th), AgentVersion: c.AgentVersion,
			KubernetesVersion: c.KubernetesVersion, RegisteredAt: timestamppb.New(c.RegisteredAt),
			DesiredConfigDigest: in.DesiredDigest, AppliedConfigDigest: c.AppliedDigest,
			VersionSkew: common != "" && c.AgentVersion != "" && c.AgentVersion != common,
			Approval:    approvalToProto(c.Approval), Registration: RegistrationToProto(c),
		}
		if !c.LastHeartbeat.IsZero() {
			pc.LastHeartbeat = timestamppb.New(c.LastHeartbeat)
		}
		failed := map[string]int64{}
		if in.Status != nil {
			f.Statuses[c.Name] = in.Status
			for _, b := range in.Status.GetBundles() {
				for _, o := range b.GetObjects() {
					if r := o.GetResult(); r == fleetv1.ApplyResult_APPLY_RESULT_FAILED || r == fleetv1.ApplyResult_APPLY_RESULT_REFUSED {
						failed[b.GetBundle()]++
					}
				}
			}
			sum := Summarize(in.Status)
			pc.SinkErrors, pc.Inventories, pc.Items, pc.InventoriesNotReady = sum.SinkErrors, sum.Inventories, sum.Items, sum.InventoriesNotReady
			if !sum.LastExport.IsZero() {
				pc.LastExportTime = timestamppb.New(sum.LastExport)
			}
			if !sum.OldestConfirm.IsZero() {
				pc.OldestConfirmTime = timestamppb.New(sum.OldestConfirm)
			}
		}
		// A bundle with objects the agent failed (or refused) to apply, or could not restore
		// after a local deletion, is not held by the cluster, whatever revision it reports.
		inSync := true
		for _, n := range failed {
			inSync = inSync && n == 0
		}
		for _, d := range in.Desired {
			pc.Bundles = append(pc.Bundles, &fleetv1.ClusterBundle{Bundle: d.Bundle, DesiredRevision: d.Revision,
				AppliedRevision: d.AppliedRevision, FailedObjects: failed[d.Bundle]})
			if d.AppliedRevision != d.Revision {
				inSync = false
			}
		}
		// The digest comparison also catches bundles the agent still holds but should prune.
		pc.ConfigInSync = inSync && in.DesiredDigest == c.AppliedDigest
		f.Clusters = append(f.Clusters, pc)
	}
	sort.Slice(f.Clusters, func(i, j int) bool { return f.Clusters[i].GetName() < f.Clusters[j].GetName() })
	return f
}

func commonVersion(inputs []Input) string {
	counts := map[string]int{}
	for _, in := range inputs {
		// A flood of registrations with a leaked token must not decide what the fleet runs.
		if !in.Cluster.Revoked && in.Cluster.Approval != store.ApprovalPending && in.Cluster.AgentVersion != "" {
			counts[in.Cluster.AgentVersion]++
		}
	}
	best, n := "", 0
	for v, c := range counts {
		if c > n || (c == n && v > best) {
			best, n = v, c
		}
	}
	return best
}

// Freshness is the export-freshness matrix: one cell per cluster and sink, sorted.
func (f *Fleet) Freshness() []*fleetv1.SinkFreshness {
	var out []*fleetv1.SinkFreshness
	for _, c := range f.Clusters {
		st := f.Statuses[c.GetName()]
		if st == nil || c.GetState() == fleetv1.ClusterState_CLUSTER_STATE_REVOKED || PendingApproval(c) {
			continue
		}
		for _, s := range st.GetSinks() {
			cell := &fleetv1.SinkFreshness{Cluster: c.GetName(), SinkKind: s.GetKind(), SinkNamespace: s.GetNamespace(),
				SinkName: s.GetName(), SinkType: s.GetType(), LastSuccessTime: s.GetLastSuccessTime(),
				ErrorClass: s.GetErrorClass(), LastError: s.GetLastError(), LastConfirmTime: s.GetLastConfirmTime(),
				SinkNotFound: s.GetNotFound()}
			// Freshness is the confirmation's age: a quiet cluster whose agent keeps confirming
			// stays fresh; the change's age is last_success_time.
			if t := Confirmed(s); !t.IsZero() {
				cell.Lag = durationpb.New(f.Now.Sub(t))
			}
			out = append(out, cell)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.GetCluster() != b.GetCluster() {
			return a.GetCluster() < b.GetCluster()
		}
		if a.GetSinkKind() != b.GetSinkKind() {
			return a.GetSinkKind() < b.GetSinkKind()
		}
		if a.GetSinkNamespace() != b.GetSinkNamespace() {
			return a.GetSinkNamespace() < b.GetSinkNamespace()
		}
		return a.GetSinkName() < b.GetSinkName()
	})
	return out
}

// Summary is the GetFleetHealth answer.
func (f *Fleet) Summary() *fleetv1.GetFleetHealthResponse {
	r := &fleetv1.GetFleetHealthResponse{
		StaleAfter: durationpb.New(f.Th.StaleAfter), OfflineAfter: durationpb.New(f.Th.OfflineAfter),
		ComputedAt: timestamppb.New(f.Now), ExportFreshness: f.Freshness(),
	}
	agents, kube := map[string]int64{}, map[string]int64{}
	for _, c := range f.Clusters {
		r.ClustersTotal++
		switch c.GetState() {
		case fleetv1.ClusterState_CLUSTER_STATE_ONLINE:
			r.ClustersOnline++
		case fleetv1.ClusterState_CLUSTER_STATE_STALE:
			r.ClustersStale++
		case fleetv1.ClusterState_CLUSTER_STATE_OFFLINE:
			r.ClustersOffline++
		case fleetv1.ClusterState_CLUSTER_STATE_PENDING:
			r.ClustersPending++
		case fleetv1.ClusterState_CLUSTER_STATE_REVOKED:
			r.ClustersRevoked++
			continue
		}
		// Visible, but not part of the fleet yet: nothing was sent to it to be in sync with.
		if PendingApproval(c) {
			r.ClustersPendingApproval++
			continue
		}
		if !c.GetConfigInSync() {
			r.ClustersConfigSkew++
		}
		if c.GetAgentVersion() != "" {
			agents[c.GetAgentVersion()]++
		}
		if c.GetKubernetesVersion() != "" {
			kube[c.GetKubernetesVersion()]++
		}
	}
	r.AgentVersions, r.KubernetesVersions = counts(agents), counts(kube)
	return r
}

func counts(m map[string]int64) []*fleetv1.VersionCount {
	out := make([]*fleetv1.VersionCount, 0, len(m))
	for v, n := range m {
		out = append(out, &fleetv1.VersionCount{Version: v, Clusters: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].GetClusters() != out[j].GetClusters() {
			return out[i].GetClusters() > out[j].GetClusters()
		}
		return out[i].GetVersion() < out[j].GetVersion()
	})
	return out
}
