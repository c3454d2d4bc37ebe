package server_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

func TestHeartbeatUpdatesHealth(t *testing.T) {
	t.Parallel()
	h := startHub(t, "")
	ctx := context.Background()
	tok := h.bootstrapToken(t, time.Hour, 0, false)
	agent, _ := h.register(t, tok.GetSecret(), "alpha", map[string]string{"env": "prod"})
	if _, err := h.admin.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{Name: "base", Manifests: goodBundle})); err != nil {
		t.Fatal(err)
	}

	// A viewer following the fleet sees the cluster change state.
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	fleetStream, err := h.fleet(h.srv.AdminToken).WatchFleet(watchCtx, connect.NewRequest(&fleetv1.WatchFleetRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	states := make(chan fleetv1.ClusterState, 64)
	go func() {
		for fleetStream.Receive() {
			if c := fleetStream.Msg().GetCluster(); c != nil && c.GetName() == "alpha" {
				states <- c.GetState()
			}
		}
	}()
	waitState := func(want fleetv1.ClusterState) {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case s := <-states:
				if s == want {
					return
				}
			case <-timeout:
				t.Fatalf("WatchFleet never reported %v", want)
			}
		}
	}
	waitState(fleetv1.ClusterState_CLUSTER_STATE_PENDING)

	cfg := watch(t, agent).next(t)
	lastExport := h.clock.Now().Add(-30 * time.Second)
	status := &fleetv1.AgentStatus{
		AgentVersion: "v0.2.0", KubernetesVersion: "v1.37.2", ConfigDigest: cfg.GetConfigDigest(),
		Bundles: []*fleetv1.AppliedBundle{{Bundle: "base", Revision: 1, Digest: cfg.GetBundles()[0].GetDigest(),
			Objects: []*fleetv1.ObjectResult{{Object: cfg.GetBundles()[0].GetObjects()[0], Result: fleetv1.ApplyResult_APPLY_RESULT_APPLIED}}}},
		Inventories: []*fleetv1.InventoryStatus{{Namespace: "team-a", Name: "workloads", ItemCount: 42}},
		Sinks: []*fleetv1.SinkStatus{
			{Kind: "KollectSnapshotSink", Namespace: "team-a", Name: "repo", Type: "git", LastSuccessTime: timestamppb.New(lastExport)},
			{Kind: "KollectDatabaseSink", Namespace: "team-a", Name: "pg", Type: "postgres", LastError: "password authentication failed",
				ErrorClass: fleetv1.SinkErrorClass_SINK_ERROR_CLASS_TERMINAL},
		},
	}
	hb, err := agent.ReportStatus(ctx, connect.NewRequest(&fleetv1.ReportStatusRequest{Status: status}))
	if err != nil {
		t.Fatal(err)
	}
	if hb.Msg.GetDesiredConfigDigest() != cfg.GetConfigDigest() || hb.Msg.GetHeartbeatInterval().AsDuration() != 15*time.Second {
		t.Fatalf("heartbeat response: %v", hb.Msg)
	}
	waitState(fleetv1.ClusterState_CLUSTER_STATE_ONLINE)

	got, err := h.admin.GetCluster(ctx, connect.NewRequest(&fleetv1.GetClusterRequest{Name: "alpha"}))
	if err != nil {
		t.Fatal(err)
	}
	c := got.Msg.GetCluster()
	if c.GetState() != fleetv1.ClusterState_CLUSTER_STATE_ONLINE || c.GetAgentVersion() != "v0.2.0" ||
		c.GetKubernetesVersion() != "v1.37.2" || !c.GetConfigInSync() || c.GetSinkErrors() != 1 ||
		c.GetBundles()[0].GetAppliedRevision() != 1 || got.Msg.GetStatus().GetInventories()[0].GetItemCount() != 42 {
		t.Fatalf("cluster after heartbeat: %v", got.Msg)
	}

	healthResp, err := h.admin.GetFleetHealth(ctx, connect.NewRequest(&fleetv1.GetFleetHealthRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	fh := healthResp.Msg
	if fh.GetClustersOnline() != 1 || fh.GetClustersConfigSkew() != 0 || len(fh.GetExportFreshness()) != 2 {
		t.Fatalf("fleet health: %v", fh)
	}
	if lag := fh.GetExportFreshness()[1].GetLag().AsDuration(); lag < 29*time.Second || lag > time.Minute {
		t.Fatalf("git sink lag %v", lag)
	}
	if fh.GetExportFreshness()[0].GetErrorClass() != fleetv1.SinkErrorClass_SINK_ERROR_CLASS_TERMINAL {
		t.Fatalf("pg sink: %v", fh.GetExportFreshness()[0])
	}

	metrics := scrape(t, h)
	for _, want := range []string{
		`kollect_hub_clusters{state="online"} 1`,
		`kollect_hub_cluster_config_in_sync{cluster="alpha"} 1`,
		`kollect_hub_sink_error{cluster="alpha",error_class="terminal",sink="pg",sink_kind="KollectDatabaseSink",sink_namespace="team-a",sink_type="postgres"} 1`,
		`kollect_hub_sink_export_lag_seconds{cluster="alpha",sink="repo"`,
		`kollect_hub_connected_agents 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}

	// No heartbeat for two minutes: stale; for an hour: offline.
	h.clock.Advance(2 * time.Minute)
	waitState(fleetv1.ClusterState_CLUSTER_STATE_STALE)
	h.clock.Advance(time.Hour)
	waitState(fleetv1.ClusterState_CLUSTER_STATE_OFFLINE)

	// A new revision the agent has not applied yet is config skew.
	v2 := strings.Replace(goodBundle, "replicas > 0", "replicas > 2", 1)
	if _, err := h.admin.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{Name: "base", Manifests: v2})); err != nil {
		t.Fatal(err)
	}
	if _, err := agent.ReportStatus(ctx, connect.NewRequest(&fleetv1.ReportStatusRequest{Status: status})); err != nil {
		t.Fatal(err)
	}
	got, err = h.admin.GetCluster(ctx, connect.NewRequest(&fleetv1.GetClusterRequest{Name: "alpha"}))
	if err != nil {
		t.Fatal(err)
	}
	if c := got.Msg.GetCluster(); c.GetConfigInSync() || c.GetBundles()[0].GetDesiredRevision() != 2 ||
		c.GetState() != fleetv1.ClusterState_CLUSTER_STATE_ONLINE {
		t.Fatalf("after a new revision: %v", c)
	}
}

func scrape(t *testing.T, h *testHub) string {
	t.Helper()
	return scrapeWith(t, h, h.srv.AdminToken)
}

// scrapeWith reads /metrics with token (a replica other than the first has no AdminToken).
func scrapeWith(t *testing.T, h *testHub, token string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, h.url+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := h.httpClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("metrics: %d %v", resp.StatusCode, err)
	}
	return string(body)
}

func TestCACertificateServed(t *testing.T) {
	t.Parallel()
	h := startHub(t, "")
	resp, err := h.httpClient().Get(h.url + "/ca.crt")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if !strings.HasPrefix(string(body), "-----BEGIN CERTIFICATE-----") {
		t.Fatalf("ca.crt: %s", body)
	}
	if resp.Proto != "HTTP/2.0" {
		t.Errorf("protocol %s, want HTTP/2.0", resp.Proto)
	}
}
