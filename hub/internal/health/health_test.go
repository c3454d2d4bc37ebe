package health

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"kollect.dev/hub/internal/store"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

func TestStatesSkewAndFreshness(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	th := Thresholds{StaleAfter: time.Minute, OfflineAfter: 10 * time.Minute}
	cl := func(name string, age time.Duration, version string) store.Cluster {
		c := store.Cluster{Name: name, AgentVersion: version, KubernetesVersion: "v1.37.0", AppliedDigest: "d1"}
		if age >= 0 {
			c.LastHeartbeat = now.Add(-age)
		}
		return c
	}
	revoked := cl("e-revoked", 0, "v1")
	revoked.Revoked = true
	status := &fleetv1.AgentStatus{Sinks: []*fleetv1.SinkStatus{
		{Kind: "KollectSnapshotSink", Namespace: "ns", Name: "git", Type: "git",
			LastSuccessTime: timestamppb.New(now.Add(-90 * time.Second))},
		{Kind: "KollectDatabaseSink", Namespace: "ns", Name: "pg", Type: "postgres", LastError: "auth failed",
			ErrorClass: fleetv1.SinkErrorClass_SINK_ERROR_CLASS_TERMINAL},
	}, Bundles: []*fleetv1.AppliedBundle{{Bundle: "base", Revision: 1, Objects: []*fleetv1.ObjectResult{
		{Result: fleetv1.ApplyResult_APPLY_RESULT_REFUSED}, {Result: fleetv1.ApplyResult_APPLY_RESULT_APPLIED}}}},
		Inventories: []*fleetv1.InventoryStatus{
			{Name: "ready", ItemCount: 10, Conditions: []*fleetv1.Condition{{Type: "Synced", Status: "False"}, {Type: "Ready", Status: "True"}}},
			{Name: "failing", ItemCount: 5, Conditions: []*fleetv1.Condition{{Type: "Ready", Status: "False"}}},
			{Name: "new", ItemCount: 2},
		}}
	f := Build([]Input{
		{Cluster: cl("a-online", 10*time.Second, "v1"), Status: status, DesiredDigest: "d1",
			Desired: []store.Desired{{Bundle: "base", Revision: 2, AppliedRevision: 1}}},
		{Cluster: cl("b-stale", 2*time.Minute, "v1"), DesiredDigest: "d1"},
		{Cluster: cl("c-offline", time.Hour, "v2"), DesiredDigest: "d1"},
		{Cluster: cl("d-pending", -1, ""), DesiredDigest: "d2"},
		{Cluster: revoked},
	}, now, th)
	want := []fleetv1.ClusterState{fleetv1.ClusterState_CLUSTER_STATE_ONLINE, fleetv1.ClusterState_CLUSTER_STATE_STALE,
		fleetv1.ClusterState_CLUSTER_STATE_OFFLINE, fleetv1.ClusterState_CLUSTER_STATE_PENDING, fleetv1.ClusterState_CLUSTER_STATE_REVOKED}
	for i, c := range f.Clusters {
		if c.GetState() != want[i] {
			t.Errorf("%s: state %v, want %v", c.GetName(), c.GetState(), want[i])
		}
	}
	a, b, c := f.Clusters[0], f.Clusters[1], f.Clusters[2]
	if a.GetConfigInSync() || !b.GetConfigInSync() || f.Clusters[3].GetConfigInSync() {
		t.Errorf("config in sync: a=%v b=%v d=%v", a.GetConfigInSync(), b.GetConfigInSync(), f.Clusters[3].GetConfigInSync())
	}
	if a.GetVersionSkew() || !c.GetVersionSkew() {
		t.Errorf("version skew: a=%v c=%v", a.GetVersionSkew(), c.GetVersionSkew())
	}
	if a.GetSinkErrors() != 1 || a.GetBundles()[0].GetFailedObjects() != 1 {
		t.Errorf("a: sink errors %d, failed objects %d", a.GetSinkErrors(), a.GetBundles()[0].GetFailedObjects())
	}
	if a.GetInventories() != 3 || a.GetItems() != 17 || a.GetInventoriesNotReady() != 2 ||
		!a.GetLastExportTime().AsTime().Equal(now.Add(-90*time.Second)) {
		t.Errorf("a: inventories %d, items %d, not ready %d, last export %v", a.GetInventories(), a.GetItems(),
			a.GetInventoriesNotReady(), a.GetLastExportTime())
	}
	if b.GetInventories() != 0 || b.GetLastExportTime() != nil {
		t.Errorf("b without status: inventories %d, last export %v", b.GetInventories(), b.GetLastExportTime())
	}
	cells := f.Freshness()
	// Sorted by cluster, sink kind, namespace and name: the database sink first.
	if len(cells) != 2 || cells[1].GetLag().AsDuration() != 90*time.Second || cells[0].GetLag() != nil ||
		cells[0].GetErrorClass() != fleetv1.SinkErrorClass_SINK_ERROR_CLASS_TERMINAL {
		t.Fatalf("freshness: %v", cells)
	}
	s := f.Summary()
	if s.GetClustersTotal() != 5 || s.GetClustersOnline() != 1 || s.GetClustersStale() != 1 || s.GetClustersOffline() != 1 ||
		s.GetClustersPending() != 1 || s.GetClustersRevoked() != 1 || s.GetClustersConfigSkew() != 2 {
		t.Fatalf("summary: %v", s)
	}
	if v := s.GetAgentVersions(); len(v) != 2 || v[0].GetVersion() != "v1" || v[0].GetClusters() != 2 {
		t.Fatalf("agent versions: %v", v)
	}
}

// A cluster that reports the desired revision and digest but holds a bundle object it failed
// to apply (or to re-create after a local deletion) is not in sync.
func TestFailedObjectsAreNotInSync(t *testing.T) {
	now := time.Now()
	status := func(r fleetv1.ApplyResult) *fleetv1.AgentStatus {
		return &fleetv1.AgentStatus{Bundles: []*fleetv1.AppliedBundle{{Bundle: "base", Revision: 2, Objects: []*fleetv1.ObjectResult{
			{Result: fleetv1.ApplyResult_APPLY_RESULT_APPLIED}, {Result: r}}}}}
	}
	in := func(name string, st *fleetv1.AgentStatus) Input {
		return Input{Cluster: store.Cluster{Name: name, AppliedDigest: "d", LastHeartbeat: now}, Status: st, DesiredDigest: "d",
			Desired: []store.Desired{{Bundle: "base", Revision: 2, AppliedRevision: 2}}}
	}
	f := Build([]Input{
		in("a-reverted", status(fleetv1.ApplyResult_APPLY_RESULT_DRIFT_REVERTED)),
		in("b-failed", status(fleetv1.ApplyResult_APPLY_RESULT_FAILED)),
		in("c-refused", status(fleetv1.ApplyResult_APPLY_RESULT_REFUSED)),
	}, now, Thresholds{StaleAfter: time.Minute, OfflineAfter: time.Hour})
	for i, want := range []bool{true, false, false} {
		if c := f.Clusters[i]; c.GetConfigInSync() != want {
			t.Errorf("%s: config in sync %v, want %v", c.GetName(), c.GetConfigInSync(), want)
		}
	}
}

// TestFreshnessIsTheConfirmationAge: a quiet sink that last changed two days ago but was
// confirmed a minute ago is a minute old; the cluster's oldest confirmation is the older of
// its sinks', a sink that reports no confirmation counting with its last export.
func TestFreshnessIsTheConfirmationAge(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	status := &fleetv1.AgentStatus{Sinks: []*fleetv1.SinkStatus{
		{Kind: "KollectDatabaseSink", Namespace: "ns", Name: "pg", Type: "postgres",
			LastSuccessTime: timestamppb.New(now.Add(-48 * time.Hour)), LastConfirmTime: timestamppb.New(now.Add(-time.Minute))},
		{Kind: "KollectSnapshotSink", Namespace: "ns", Name: "old-agent", Type: "git",
			LastSuccessTime: timestamppb.New(now.Add(-3 * time.Minute))},
	}}
	f := Build([]Input{{Cluster: store.Cluster{Name: "quiet", LastHeartbeat: now}, Status: status}}, now,
		Thresholds{StaleAfter: time.Minute, OfflineAfter: 10 * time.Minute})
	cells := map[string]*fleetv1.SinkFreshness{}
	for _, c := range f.Freshness() {
		cells[c.GetSinkName()] = c
	}
	if lag := cells["pg"].GetLag().AsDuration(); lag != time.Minute {
		t.Errorf("confirmed a minute ago, changed two days ago: lag %s, want 1m", lag)
	}
	if cells["pg"].GetLastConfirmTime() == nil || !cells["pg"].GetLastSuccessTime().AsTime().Equal(now.Add(-48*time.Hour)) {
		t.Errorf("the cell must carry both times: %+v", cells["pg"])
	}
	if lag := cells["old-agent"].GetLag().AsDuration(); lag != 3*time.Minute {
		t.Errorf("no confirmation reported: lag %s, want the export's age 3m", lag)
	}
	if got := f.Clusters[0].GetOldestConfirmTime().AsTime(); !got.Equal(now.Add(-3 * time.Minute)) {
		t.Errorf("oldest confirmation %v, want the old agent's sink's export 3m ago", got)
	}
}
