package server_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"connectrpc.com/connect"

	"kollect.dev/hub/internal/server"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/testenv"
)

// pg is the PostgreSQL server for the replica tests; a missing server fails the run.
var pg *testenv.Postgres

func TestMain(m *testing.M) {
	var err error
	pg, err = testenv.StartPostgres()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting PostgreSQL for the hub replica tests:", err)
		os.Exit(1)
	}
	code := m.Run()
	pg.Stop()
	os.Exit(code)
}

// TestReplicasShareState runs two hubs on one PostgreSQL database: what is changed through one
// reaches agents connected to the other.
func TestReplicasShareState(t *testing.T) {
	t.Parallel()
	dsn, err := pg.CreateDatabase(context.Background(), "hub_replicas")
	if err != nil {
		t.Fatal(err)
	}
	shared := func(c *server.Config) {
		c.StoreDSN = dsn
		c.CredentialRecheck = 300 * time.Millisecond
	}
	a := startHub(t, "", shared)
	b := startHub(t, "", shared)
	if a.admin == nil || b.srv.AdminToken != "" {
		t.Fatal("exactly the first replica must create the admin token")
	}
	adminOnB := b.fleet(a.srv.AdminToken)
	ctx := context.Background()

	tok := a.bootstrapToken(t, time.Hour, 0, false)
	agent, _ := b.register(t, tok.GetSecret(), "edge-1", map[string]string{"env": "prod"})
	stream := watch(t, agent)
	stream.next(t)

	if _, err := a.admin.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{
		Name: "base", Manifests: goodBundle, ClusterSelector: prodOnly()})); err != nil {
		t.Fatal(err)
	}
	if got := stream.next(t); len(got.GetBundles()) != 1 || got.GetBundles()[0].GetRevision() != 1 {
		t.Fatalf("agent on replica b got %v", got)
	}
	clusters, err := adminOnB.ListClusters(ctx, connect.NewRequest(&fleetv1.ListClustersRequest{LabelSelector: "env=prod"}))
	if err != nil || len(clusters.Msg.GetClusters()) != 1 {
		t.Fatalf("clusters through b: %v %v", clusters.Msg, err)
	}

	if _, err := a.admin.RevokeAgent(ctx, connect.NewRequest(&fleetv1.RevokeAgentRequest{ClusterName: "edge-1"})); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-stream.err:
		wantCode(t, err, connect.CodeUnauthenticated, "stream on b after revocation through a")
	case <-time.After(10 * time.Second):
		t.Fatal("stream on replica b stayed open after revocation through replica a")
	}
	_, err = agent.ReportStatus(ctx, connect.NewRequest(&fleetv1.ReportStatusRequest{Status: &fleetv1.AgentStatus{}}))
	wantCode(t, err, connect.CodeUnauthenticated, "heartbeat on b after revocation through a")
}

// TestReplicasPushConfigChanges: a bundle applied through one replica reaches an agent
// streaming from the other through PostgreSQL's LISTEN/NOTIFY, not the poll. Both replicas
// poll once an hour, so only the notification can deliver it within the test's wait.
func TestReplicasPushConfigChanges(t *testing.T) {
	t.Parallel()
	dsn, err := pg.CreateDatabase(context.Background(), "hub_replicas_push")
	if err != nil {
		t.Fatal(err)
	}
	shared := func(c *server.Config) {
		c.StoreDSN = dsn
		c.PollInterval = time.Hour
	}
	a := startHub(t, "", shared)
	b := startHub(t, "", shared)
	ctx := context.Background()

	tok := a.bootstrapToken(t, time.Hour, 0, false)
	agent, _ := b.register(t, tok.GetSecret(), "edge-1", map[string]string{"env": "prod"})
	stream := watch(t, agent)
	stream.next(t)

	for rev := int64(1); rev <= 3; rev++ {
		manifests := goodBundle + fmt.Sprintf("\n# revision %d\n", rev)
		applied := time.Now()
		if _, err := a.admin.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{
			Name: "base", Manifests: manifests, ClusterSelector: prodOnly()})); err != nil {
			t.Fatal(err)
		}
		got := stream.next(t)
		if len(got.GetBundles()) != 1 || got.GetBundles()[0].GetRevision() != rev {
			t.Fatalf("agent on replica b got %v, want revision %d", got, rev)
		}
		t.Logf("revision %d applied on replica a reached the agent on replica b in %s", rev, time.Since(applied).Round(time.Millisecond))
	}
}

// TestReplicasRelayPreviews: a preview asked through replica a reaches an agent streaming from
// replica b (PostgreSQL's NOTIFY; both poll once an hour), the agent answers to b, and a's
// PreviewBundle returns that answer.
func TestReplicasRelayPreviews(t *testing.T) {
	t.Parallel()
	dsn, err := pg.CreateDatabase(context.Background(), "hub_replicas_preview")
	if err != nil {
		t.Fatal(err)
	}
	shared := func(c *server.Config) {
		c.StoreDSN = dsn
		c.PollInterval = time.Hour
	}
	a := startHub(t, "", shared)
	b := startHub(t, "", shared)
	tok := a.bootstrapToken(t, time.Hour, 0, false)
	onB := b.startAgent(t, tok.GetSecret(), "canary-1", map[string]string{"ring": "canary"}, 0, healthy)
	a.waitOnline(t, onB)

	asked := time.Now()
	resp, err := a.admin.PreviewBundle(context.Background(), connect.NewRequest(previewReq(30*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("PreviewBundle on replica a returned the answer of the agent on replica b in %s", time.Since(asked).Round(time.Millisecond))
	if r := resp.Msg.GetResults(); len(r) != 1 || r[0].GetCluster() != "canary-1" || len(resp.Msg.GetPending()) != 0 ||
		r[0].GetTargets()[0].GetRows() != 8 {
		t.Fatalf("replica a's preview: %v", resp.Msg)
	}
	if n := len(onB.previewsSeen()); n != 1 {
		t.Fatalf("the agent on replica b received the preview %d times, want once", n)
	}
	// b counts the answer once its store committed it, and the commit is what a's
	// PreviewBundle returned on: the count may follow a moment later.
	eventually(t, func() error {
		if n := metric(t, b, a.srv.AdminToken, `kollect_hub_preview_answers_total{result="evaluated"}`); n != 1 {
			return fmt.Errorf("replica b received %v answers, want the agent's one", n)
		}
		return nil
	})
	if n := metric(t, a, a.srv.AdminToken, `kollect_hub_preview_answers_total{result="evaluated"}`); n != 0 {
		t.Fatalf("replica a received %v answers itself, want none (the agent streams from b)", n)
	}
}
