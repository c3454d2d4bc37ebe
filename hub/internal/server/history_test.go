package server_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"
)

// TestClusterSummaryAndHeartbeatHistory checks the per-cluster summary of the last heartbeat
// (inventories, items, not ready, last export) in ListClusters and WatchFleet — sent again
// when it changes, not for a heartbeat that changes nothing — and the heartbeat history.
func TestClusterSummaryAndHeartbeatHistory(t *testing.T) {
	t.Parallel()
	h := startHub(t, "")
	ctx := context.Background()
	tok := h.bootstrapToken(t, time.Hour, 0, false)
	agent, _ := h.register(t, tok.GetSecret(), "alpha", map[string]string{"env": "prod"})
	h.apply(t, 1, false)
	cfg := watch(t, agent).next(t)

	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	stream, err := h.admin.WatchFleet(watchCtx, connect.NewRequest(&fleetv1.WatchFleetRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	clusters := make(chan *fleetv1.Cluster, 256)
	go func() {
		for stream.Receive() {
			if c := stream.Msg().GetCluster(); c != nil {
				clusters <- c
			}
		}
	}()
	next := func(what string) *fleetv1.Cluster {
		t.Helper()
		select {
		case c := <-clusters:
			return c
		case <-time.After(10 * time.Second):
			t.Fatalf("WatchFleet: no cluster event while waiting for %s", what)
		}
		return nil
	}
	waitItems := func(items int64) *fleetv1.Cluster {
		t.Helper()
		for {
			if c := next("alpha with items"); c.GetName() == "alpha" && c.GetItems() == items {
				return c
			}
		}
	}

	newest := h.clock.Now().Add(-20 * time.Second)
	status := &fleetv1.AgentStatus{AgentVersion: "v0.2.0", KubernetesVersion: "v1.37.2", ConfigDigest: cfg.GetConfigDigest(),
		Inventories: []*fleetv1.InventoryStatus{
			{Namespace: "team-a", Name: "workloads", ItemCount: 40, Conditions: []*fleetv1.Condition{{Type: "Ready", Status: "True"}}},
			{Namespace: "team-a", Name: "config", ItemCount: 2, Conditions: []*fleetv1.Condition{{Type: "Ready", Status: "False"}}},
		},
		Sinks: []*fleetv1.SinkStatus{
			{Kind: "KollectSnapshotSink", Namespace: "team-a", Name: "repo", Type: "git", LastSuccessTime: timestamppb.New(newest.Add(-time.Hour))},
			{Kind: "KollectDatabaseSink", Namespace: "team-a", Name: "pg", Type: "postgres", LastSuccessTime: timestamppb.New(newest),
				LastError: "timeout", ErrorClass: fleetv1.SinkErrorClass_SINK_ERROR_CLASS_TRANSIENT},
		},
	}
	report := func(items int64) {
		t.Helper()
		status.Inventories[0].ItemCount = items - 2
		if _, err := agent.ReportStatus(ctx, connect.NewRequest(&fleetv1.ReportStatusRequest{Status: status})); err != nil {
			t.Fatal(err)
		}
	}
	report(42)
	c := waitItems(42)
	if c.GetInventories() != 2 || c.GetInventoriesNotReady() != 1 || !c.GetLastExportTime().AsTime().Equal(newest) ||
		c.GetSinkErrors() != 1 {
		t.Fatalf("summary in WatchFleet: %v", c)
	}
	list, err := h.admin.ListClusters(ctx, connect.NewRequest(&fleetv1.ListClustersRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if c := list.Msg.GetClusters()[0]; c.GetItems() != 42 || c.GetInventories() != 2 || c.GetInventoriesNotReady() != 1 {
		t.Fatalf("summary in ListClusters: %v", c)
	}

	// The same status again changes only the heartbeat time: no event. A registration after
	// it is a visible change, so its event proves a publication came and went without alpha.
	h.clock.Advance(5 * time.Second)
	report(42)
	h.register(t, tok.GetSecret(), "beta", nil)
	for c := next("beta"); c.GetName() != "beta"; c = next("beta") {
		t.Fatalf("WatchFleet sent %s again for a heartbeat that changed nothing: %v", c.GetName(), c)
	}
	report(43)
	waitItems(43)

	// History: the first heartbeat (pending), the first one online, a heartbeat after two
	// silent minutes (stale), the next one (online again); heartbeats that change nothing
	// within a minute leave no record, and neither does the new item count 5 s after a record
	// (an item count alone is recorded at most once a minute): the stale record carries it.
	h.clock.Advance(2 * time.Minute)
	report(43)
	report(43)
	report(43)
	viewer := h.apiToken(t, "reader", fleetv1.Role_ROLE_VIEWER)
	hist, err := viewer.ListHeartbeats(ctx, connect.NewRequest(&fleetv1.ListHeartbeatsRequest{Cluster: "alpha"}))
	if err != nil {
		t.Fatal(err)
	}
	type rec struct {
		state fleetv1.ClusterState
		items int64
	}
	want := []rec{{fleetv1.ClusterState_CLUSTER_STATE_ONLINE, 43}, {fleetv1.ClusterState_CLUSTER_STATE_STALE, 43},
		{fleetv1.ClusterState_CLUSTER_STATE_ONLINE, 42}, {fleetv1.ClusterState_CLUSTER_STATE_PENDING, 42}}
	got := hist.Msg.GetHeartbeats()
	if len(got) != len(want) {
		t.Fatalf("history: %v", got)
	}
	for i, w := range want {
		if r := got[i]; r.GetState() != w.state || r.GetItems() != w.items || r.GetInventories() != 2 ||
			r.GetInventoriesNotReady() != 1 || r.GetSinkErrors() != 1 || r.GetAgentVersion() != "v0.2.0" ||
			r.GetAppliedConfigDigest() != cfg.GetConfigDigest() {
			t.Errorf("record %d: %v, want %v", i, r, w)
		}
		if i > 0 && got[i].GetTime().AsTime().After(got[i-1].GetTime().AsTime()) {
			t.Errorf("record %d is newer than record %d", i, i-1)
		}
	}
	two, err := viewer.ListHeartbeats(ctx, connect.NewRequest(&fleetv1.ListHeartbeatsRequest{Cluster: "alpha", Limit: 2}))
	if err != nil || len(two.Msg.GetHeartbeats()) != 2 {
		t.Fatalf("limit 2: %v %v", two, err)
	}
	_, err = viewer.ListHeartbeats(ctx, connect.NewRequest(&fleetv1.ListHeartbeatsRequest{Cluster: "nope"}))
	wantCode(t, err, connect.CodeNotFound, "history of an unknown cluster")
	_, err = viewer.ListHeartbeats(ctx, connect.NewRequest(&fleetv1.ListHeartbeatsRequest{}))
	wantCode(t, err, connect.CodeInvalidArgument, "history without a cluster")
}

// TestWhoAmI: every token learns its own name and role, and asking leaves no audit trace.
func TestWhoAmI(t *testing.T) {
	t.Parallel()
	h := startHub(t, "")
	ctx := context.Background()
	for _, tc := range []struct {
		client fleetv1connect.FleetServiceClient
		name   string
		role   fleetv1.Role
	}{
		{h.admin, "admin", fleetv1.Role_ROLE_ADMIN},
		{h.apiToken(t, "deployer", fleetv1.Role_ROLE_OPERATOR), "deployer", fleetv1.Role_ROLE_OPERATOR},
		{h.apiToken(t, "reader", fleetv1.Role_ROLE_VIEWER), "reader", fleetv1.Role_ROLE_VIEWER},
	} {
		resp, err := tc.client.WhoAmI(ctx, connect.NewRequest(&fleetv1.WhoAmIRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Msg.GetName() != tc.name || resp.Msg.GetRole() != tc.role {
			t.Errorf("WhoAmI: %v, want %s %v", resp.Msg, tc.name, tc.role)
		}
	}
	_, err := h.fleet("kat_unknown").WhoAmI(ctx, connect.NewRequest(&fleetv1.WhoAmIRequest{}))
	wantCode(t, err, connect.CodeUnauthenticated, "WhoAmI with an unknown token")
	events, err := h.admin.ListAuditEvents(ctx, connect.NewRequest(&fleetv1.ListAuditEventsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Msg.GetEvents() {
		if e.GetAction() == "WhoAmI" {
			t.Fatalf("WhoAmI was audited: %v", e)
		}
	}
}
