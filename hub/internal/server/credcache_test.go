package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"kollect.dev/hub/internal/server"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"
)

// metricValue reads one unlabelled series from h's /metrics with an admin token.
func metricValue(t *testing.T, h *testHub, token, name string) float64 {
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
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err == nil {
				return f
			}
		}
	}
	t.Fatalf("no %s on /metrics", name)
	return 0
}

// beat sends one heartbeat and returns only its error.
func beat(t *testing.T, agent fleetv1connect.AgentServiceClient) error {
	t.Helper()
	_, err := heartbeat(t, agent)
	return err
}

// TestCredentialChecksAnswerFromMemory: once an agent has called, its calls are authenticated
// without reading its cluster from the store (kollect_hub_credential_store_reads_total stays
// put while kollect_hub_credential_lookups_total grows), until a registration changes anywhere
// in the fleet; a revocation is still refused at the very next call.
func TestCredentialChecksAnswerFromMemory(t *testing.T) {
	t.Parallel()
	h := startHub(t, "")
	tok := h.bootstrapToken(t, time.Hour, 0, false)
	agent, _ := h.register(t, tok.GetSecret(), "edge-1", nil)
	admin := h.srv.AdminToken
	if err := beat(t, agent); err != nil {
		t.Fatal(err)
	}
	reads := metricValue(t, h, admin, "kollect_hub_credential_store_reads_total")
	lookups := metricValue(t, h, admin, "kollect_hub_credential_lookups_total")
	epochs := metricValue(t, h, admin, "kollect_hub_cluster_epoch_reads_total")
	for range 20 {
		if err := beat(t, agent); err != nil {
			t.Fatal(err)
		}
	}
	if got := metricValue(t, h, admin, "kollect_hub_credential_store_reads_total"); got != reads {
		t.Fatalf("20 heartbeats of a known credential read the store %v times", got-reads)
	}
	if got := metricValue(t, h, admin, "kollect_hub_cluster_epoch_reads_total"); got != epochs {
		t.Fatalf("20 heartbeats of a known credential read the cluster epoch %v times; their writes check it", got-epochs)
	}
	if got := metricValue(t, h, admin, "kollect_hub_credential_lookups_total"); got < lookups+20 {
		t.Fatalf("credential lookups %v, want at least %v", got, lookups+20)
	}

	// Another cluster's registration moves the cluster epoch, which a heartbeat does not read:
	// its write finds its own cluster's credential unchanged.
	h.register(t, tok.GetSecret(), "edge-2", nil)
	for range 3 {
		if err := beat(t, agent); err != nil {
			t.Fatal(err)
		}
	}
	if got := metricValue(t, h, admin, "kollect_hub_credential_store_reads_total"); got != reads {
		t.Fatalf("after another cluster's registration, 3 heartbeats read the store %v times; their credential did not change", got-reads)
	}

	if _, err := h.admin.RevokeAgent(context.Background(), connect.NewRequest(&fleetv1.RevokeAgentRequest{ClusterName: "edge-1"})); err != nil {
		t.Fatal(err)
	}
	wantCode(t, beat(t, agent), connect.CodeUnauthenticated, "the first heartbeat after the revocation")
}

// TestReplicasRevocationAtNextCall: an agent whose credential replica b has cached (its calls
// answered from memory) is refused at its very next call on b after replica a revoked it, and
// likewise after a replaced it with a new registration. Both replicas poll once an hour and
// recheck streams once an hour, so only the per-call checks can refuse it: a stream's read of
// the shared cluster epoch, or a heartbeat's write, which reads no epoch and finds the
// credential b cached gone from the cluster's row.
func TestReplicasRevocationAtNextCall(t *testing.T) {
	t.Parallel()
	dsn, err := pg.CreateDatabase(context.Background(), "hub_replicas_revoke")
	if err != nil {
		t.Fatal(err)
	}
	shared := func(c *server.Config) {
		c.StoreDSN = dsn
		c.PollInterval = time.Hour
		c.CredentialRecheck = time.Hour
	}
	a := startHub(t, "", shared)
	b := startHub(t, "", shared)
	ctx := context.Background()
	tok := a.bootstrapToken(t, time.Hour, 0, true)

	onB, _ := b.register(t, tok.GetSecret(), "edge-1", nil)
	if err := beat(t, onB); err != nil {
		t.Fatal(err)
	}
	admin := a.srv.AdminToken
	reads := metricValue(t, b, admin, "kollect_hub_credential_store_reads_total")
	if err := beat(t, onB); err != nil {
		t.Fatal(err)
	}
	if got := metricValue(t, b, admin, "kollect_hub_credential_store_reads_total"); got != reads {
		t.Fatalf("a heartbeat of a cached credential read the store on replica b (%v reads)", got-reads)
	}
	if _, err := a.admin.RevokeAgent(ctx, connect.NewRequest(&fleetv1.RevokeAgentRequest{ClusterName: "edge-1"})); err != nil {
		t.Fatal(err)
	}
	// The next call is a new stream: refused by the credential check (a heartbeat would also
	// be refused by the store's write, which skips revoked clusters).
	streamCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stream, err := onB.WatchConfig(streamCtx, connect.NewRequest(&fleetv1.WatchConfigRequest{}))
	if err == nil {
		if stream.Receive() {
			t.Fatalf("replica b streamed configuration to an agent replica a revoked: %v", stream.Msg())
		}
		err = stream.Err()
	}
	wantCode(t, err, connect.CodeUnauthenticated, "replica b, the first stream after replica a revoked the agent")
	wantCode(t, beat(t, onB), connect.CodeUnauthenticated, "replica b, the first heartbeat after replica a revoked the agent")

	// A replacement through a: the credential b cached for edge-2 is refused on b at once.
	old, _ := b.register(t, tok.GetSecret(), "edge-2", nil)
	if err := beat(t, old); err != nil {
		t.Fatal(err)
	}
	if _, err := a.registrar.Register(ctx, connect.NewRequest(&fleetv1.RegisterRequest{ClusterName: "edge-2",
		BootstrapToken: tok.GetSecret(), ReplaceExisting: true})); err != nil {
		t.Fatal(err)
	}
	wantCode(t, beat(t, old), connect.CodeUnauthenticated, "replica b, the replaced credential's next heartbeat")

	// A revocation through a, and the agent's next call on b is a heartbeat: b answers it
	// from its cache, without an epoch read, until the write refuses it.
	third, _ := b.register(t, tok.GetSecret(), "edge-3", nil)
	for range 2 {
		if err := beat(t, third); err != nil {
			t.Fatal(err)
		}
	}
	epochs := metricValue(t, b, admin, "kollect_hub_cluster_epoch_reads_total")
	if err := beat(t, third); err != nil {
		t.Fatal(err)
	}
	if got := metricValue(t, b, admin, "kollect_hub_cluster_epoch_reads_total"); got != epochs {
		t.Fatalf("a heartbeat of a cached credential read the cluster epoch on replica b (%v reads)", got-epochs)
	}
	if _, err := a.admin.RevokeAgent(ctx, connect.NewRequest(&fleetv1.RevokeAgentRequest{ClusterName: "edge-3"})); err != nil {
		t.Fatal(err)
	}
	wantCode(t, beat(t, third), connect.CodeUnauthenticated, "replica b, the first heartbeat after replica a revoked the agent")
	if got := metricValue(t, b, admin, "kollect_hub_cluster_epoch_reads_total"); got == epochs {
		t.Fatal("the refused heartbeat was not checked against a fresh cluster epoch")
	}
}
