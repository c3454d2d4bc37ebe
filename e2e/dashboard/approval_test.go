package dashboard

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"kollect.dev/e2e/dashboard/fleetsim"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// TestDashboardRegistrationApproval runs web/e2e/approval.test.mjs against a hub where one
// simulated cluster registered with a plain token and one with a token that requires
// approval: the browser test finds the second shown apart, with its token and address and no
// bundle, approves it, and sees the bundle reach it. The first cluster also names a sink it
// does not have, which the freshness matrix shows as an error cell.
func TestDashboardRegistrationApproval(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h := startHub(t)
	admin := h.fleet(h.adminToken)
	open, err := admin.CreateBootstrapToken(ctx, connect.NewRequest(&fleetv1.CreateBootstrapTokenRequest{
		Description: "known clusters", Ttl: durationpb.New(time.Hour), MaxUses: 5}))
	if err != nil {
		t.Fatal(err)
	}
	gated, err := admin.CreateBootstrapToken(ctx, connect.NewRequest(&fleetv1.CreateBootstrapTokenRequest{
		Description: "handed to the whole team", Ttl: durationpb.New(time.Hour), MaxUses: 5, RequireApproval: true}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{
		Name: "workloads", Description: "Deployments of team-a to git", Manifests: workloads(t), Message: "first revision"})); err != nil {
		t.Fatal(err)
	}

	known, err := fleetsim.New(h.url, h.caPEM, open.Msg.GetSecret(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(known.Close)
	strangers, err := fleetsim.New(h.url, h.caPEM, gated.Msg.GetSecret(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(strangers.Close)
	k := fleetsim.Healthy("known-1", map[string]string{"env": "prod"}, 120)
	k.Sinks = append(k.Sinks, fleetsim.Sink{Kind: "KollectDatabaseSink", Namespace: "team-a", Name: "gone", Age: -1, NotFound: true,
		Error: "sink not found: no KollectDatabaseSink team-a/gone in this cluster, named by inventory team-a/workloads",
		Class: fleetv1.SinkErrorClass_SINK_ERROR_CLASS_TERMINAL})
	if err := known.Add(ctx, k); err != nil {
		t.Fatal(err)
	}
	if err := strangers.Add(ctx, fleetsim.Healthy("stranger-1", map[string]string{"env": "prod"}, 60)); err != nil {
		t.Fatal(err)
	}

	cmd := exec.CommandContext(ctx, tools.node, "--test", "--test-reporter=spec", "e2e/approval.test.mjs")
	cmd.Dir = filepath.Join(root, "web")
	cmd.Env = append(os.Environ(), "KOLLECT_HUB_URL="+h.url, "KOLLECT_ADMIN_TOKEN="+h.adminToken,
		"KOLLECT_CHROMIUM="+tools.chromium, "KOLLECT_GATED_TOKEN="+gated.Msg.GetToken().GetId())
	out, err := cmd.CombinedOutput()
	t.Logf("browser test output:\n%s", out)
	if err != nil {
		t.Fatalf("browser test failed: %v", err)
	}
	// What the browser saw, from the API: approved by the admin's token, holding the bundle.
	resp, err := admin.GetCluster(ctx, connect.NewRequest(&fleetv1.GetClusterRequest{Name: "stranger-1"}))
	if err != nil {
		t.Fatal(err)
	}
	c := resp.Msg.GetCluster()
	if c.GetApproval() != fleetv1.ClusterApproval_CLUSTER_APPROVAL_APPROVED || c.GetRegistration().GetDecidedBy() != "token:admin" ||
		len(c.GetBundles()) != 1 || c.GetBundles()[0].GetAppliedRevision() != 1 {
		t.Fatalf("stranger-1 after the browser test: %s, %v, bundles %v", c.GetApproval(), c.GetRegistration(), c.GetBundles())
	}
	if !strings.HasPrefix(c.GetRegistration().GetPeerAddress(), "127.") {
		t.Fatalf("stranger-1 registered from %q", c.GetRegistration().GetPeerAddress())
	}
}
