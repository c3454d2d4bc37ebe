package fleet

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/testenv"
)

// TestAgentCredentialRotates runs the shipped kollect-agent against a hub whose agent
// credentials live 20 s: the agent rotates its credential over its connection (its Secret
// changes), the replaced credential stops working after the grace period, and the agent
// keeps heartbeating past the first credential's life, rotating again.
func TestAgentCredentialRotates(t *testing.T) {
	t.Parallel() // its own control planes, hub and ports: it waits alongside the others
	ctx := context.Background()
	work := t.TempDir()
	h := startHubArgs(t, work, "--agent-credential-ttl", "20s", "--agent-credential-grace", "5s")
	admin := h.fleet(h.adminToken)
	tok, err := admin.CreateBootstrapToken(ctx, connect.NewRequest(&fleetv1.CreateBootstrapTokenRequest{Description: "rotation"}))
	if err != nil {
		t.Fatal(err)
	}
	cps, err := testenv.StartN("rotate", 1, testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testenv.StopAll(cps) })
	cp := cps[0]
	startAgent(t, cp, h, tok.Msg.GetSecret(), "env=e2e")
	stored := func() string {
		sec := &corev1.Secret{}
		if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "kollect-system", Name: "kollect-hub-credential"}, sec); err != nil {
			return ""
		}
		return string(sec.Data["credential"])
	}
	var first string
	eventually(t, 60*time.Second, "the agent's first credential stored", func() (bool, string) {
		first = stored()
		return first != "", "no credential Secret yet"
	})
	var second string
	eventually(t, 60*time.Second, "the agent rotating its credential", func() (bool, string) {
		second = stored()
		return second != "" && second != first, "the Secret still holds the first credential"
	})
	eventually(t, 60*time.Second, "the replaced credential refused after its grace period", func() (bool, string) {
		_, err := h.agentClient(first).ReportStatus(ctx, connect.NewRequest(&fleetv1.ReportStatusRequest{Status: &fleetv1.AgentStatus{}}))
		return connect.CodeOf(err) == connect.CodeUnauthenticated, fmt.Sprint(err)
	})
	eventually(t, 60*time.Second, "a second rotation", func() (bool, string) {
		third := stored()
		return third != "" && third != second && third != first, "the Secret still holds the second credential"
	})
	// The agent is online on its rotated credential, after the first one's life ended.
	eventually(t, 30*time.Second, "the cluster online", func() (bool, string) {
		c, err := admin.GetCluster(ctx, connect.NewRequest(&fleetv1.GetClusterRequest{Name: cp.Name}))
		if err != nil {
			return false, err.Error()
		}
		return c.Msg.GetCluster().GetState() == fleetv1.ClusterState_CLUSTER_STATE_ONLINE, c.Msg.GetCluster().GetState().String()
	})
	audit, err := admin.ListAuditEvents(ctx, connect.NewRequest(&fleetv1.ListAuditEventsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	rotations := 0
	for _, e := range audit.Msg.GetEvents() {
		if e.GetAction() == "RotateCredential" && e.GetActor() == "cluster:"+cp.Name {
			rotations++
		}
	}
	if rotations < 2 {
		t.Errorf("%d rotations audited, want at least 2", rotations)
	}
}
