package server_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"kollect.dev/hub/internal/server"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"
)

// gatedToken creates, as admin, a bootstrap token whose registrations wait for approval.
func (h *testHub) gatedToken(t *testing.T) *fleetv1.CreateBootstrapTokenResponse {
	t.Helper()
	resp, err := h.admin.CreateBootstrapToken(context.Background(), connect.NewRequest(&fleetv1.CreateBootstrapTokenRequest{
		Description: "handed to the whole team", Ttl: durationpb.New(time.Hour), MaxUses: 10, RequireApproval: true}))
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Msg.GetToken().GetRequireApproval() {
		t.Fatalf("token created with require_approval says %v", resp.Msg.GetToken())
	}
	return resp.Msg
}

// watchPending opens a WatchConfig stream in the background: Connect returns from the call
// only with the response headers, which the hub sends with the first message, and a cluster
// pending approval gets none.
func watchPending(t *testing.T, agent fleetv1connect.AgentServiceClient) *configStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cs := &configStream{msgs: make(chan *fleetv1.WatchConfigResponse, 16), err: make(chan error, 1), cancel: cancel}
	go func() {
		stream, err := agent.WatchConfig(ctx, connect.NewRequest(&fleetv1.WatchConfigRequest{}))
		if err != nil {
			cs.err <- err
			return
		}
		for stream.Receive() {
			cs.msgs <- stream.Msg()
		}
		cs.err <- stream.Err()
		stream.Close()
	}()
	t.Cleanup(cancel)
	return cs
}

// reportApplied sends a heartbeat saying the agent applied cfg (nil: nothing).
func reportApplied(t *testing.T, a fleetv1connect.AgentServiceClient, cfg *fleetv1.WatchConfigResponse) *fleetv1.ReportStatusResponse {
	t.Helper()
	st := &fleetv1.AgentStatus{AgentVersion: "v0.1.0", ConfigDigest: cfg.GetConfigDigest()}
	for _, b := range cfg.GetBundles() {
		st.Bundles = append(st.Bundles, &fleetv1.AppliedBundle{Bundle: b.GetBundle(), Revision: b.GetRevision(), Digest: b.GetDigest()})
	}
	resp, err := a.ReportStatus(context.Background(), connect.NewRequest(&fleetv1.ReportStatusRequest{Status: st}))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Msg
}

func clusterNamed(t *testing.T, h *testHub, name string) *fleetv1.Cluster {
	t.Helper()
	resp, err := h.admin.GetCluster(context.Background(), connect.NewRequest(&fleetv1.GetClusterRequest{Name: name}))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Msg.GetCluster()
}

func fleetHealth(t *testing.T, h *testHub) *fleetv1.GetFleetHealthResponse {
	t.Helper()
	resp, err := h.admin.GetFleetHealth(context.Background(), connect.NewRequest(&fleetv1.GetFleetHealthRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Msg
}

// TestApprovalPendingClusterReceivesNothingUntilApproved: a cluster registered with a token
// that requires approval is listed as pending with who registered it (the token, its address,
// its agent version), heartbeats, but its WatchConfig stream receives nothing — not even an
// empty configuration — while an approved cluster of the same labels receives every revision
// (the positive control); it is left out of config skew, of the bundle's selected clusters
// and of previews. Once approved, the same stream's first message is the bundle's current
// revision, released while it waited, and it counts in the skew until it applies it.
func TestApprovalPendingClusterReceivesNothingUntilApproved(t *testing.T) {
	t.Parallel()
	h := startHub(t, "")
	ctx := context.Background()
	if _, err := h.admin.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{Name: "base", Manifests: goodBundle,
		ClusterSelector: prodOnly()})); err != nil {
		t.Fatal(err)
	}
	open := h.bootstrapToken(t, time.Hour, 0, false).GetSecret()
	gated := h.gatedToken(t)
	control, _ := h.register(t, open, "control", map[string]string{"env": "prod"})
	// Approved and never applying anything: the config skew the fleet has without the stranger.
	laggard, _ := h.register(t, open, "laggard", map[string]string{"env": "prod"})
	resp, err := h.registrar.Register(ctx, connect.NewRequest(&fleetv1.RegisterRequest{ClusterName: "stranger",
		Labels: map[string]string{"env": "prod", "ring": "stranger"}, BootstrapToken: gated.GetSecret(), AgentVersion: "v6.6.6"}))
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Msg.GetPendingApproval() {
		t.Fatal("the registration with a token requiring approval does not say it is pending")
	}
	stranger := h.agent(resp.Msg.GetCredential())

	controlStream, strangerStream := watch(t, control), watchPending(t, stranger)
	if got := controlStream.next(t); len(got.GetBundles()) != 1 || got.GetBundles()[0].GetRevision() != 1 {
		t.Fatalf("the approved cluster's configuration: %v", got)
	}
	eventually(t, func() error {
		if n := h.srv.Connected(); n != 2 {
			return fmt.Errorf("%d configuration streams open, want both", n)
		}
		return nil
	})
	// A new revision while both streams are open: the dispatcher builds and sends the fleet's
	// configuration with the stranger's stream subscribed.
	if _, err := h.admin.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{Name: "base",
		Manifests: strings.Replace(goodBundle, "replicas > 0", "replicas > 1", 1), ClusterSelector: prodOnly()})); err != nil {
		t.Fatal(err)
	}
	rev2 := controlStream.next(t)
	if len(rev2.GetBundles()) != 1 || rev2.GetBundles()[0].GetRevision() != 2 {
		t.Fatalf("the approved cluster's second configuration: %v", rev2)
	}
	reportApplied(t, control, rev2)
	reportApplied(t, laggard, nil)
	if hb := reportApplied(t, stranger, nil); hb.GetDesiredConfigDigest() == rev2.GetConfigDigest() {
		t.Fatalf("the pending cluster is told to hold the fleet's configuration %s", hb.GetDesiredConfigDigest())
	}

	c := clusterNamed(t, h, "stranger")
	reg := c.GetRegistration()
	if c.GetApproval() != fleetv1.ClusterApproval_CLUSTER_APPROVAL_PENDING || len(c.GetBundles()) != 0 {
		t.Fatalf("pending cluster: approval %s, bundles %v", c.GetApproval(), c.GetBundles())
	}
	if reg.GetBootstrapTokenId() != gated.GetToken().GetId() || reg.GetBootstrapTokenDescription() != "handed to the whole team" ||
		reg.GetBootstrapTokenCreatedBy() != "token:admin" || reg.GetPeerAddress() != "127.0.0.1" || reg.GetAgentVersion() != "v6.6.6" {
		t.Fatalf("registration recorded as %v", reg)
	}
	if c.GetRegisteredAt() == nil {
		t.Fatal("no registration time")
	}
	if got := clusterNamed(t, h, "control"); got.GetApproval() != fleetv1.ClusterApproval_CLUSTER_APPROVAL_APPROVED ||
		got.GetRegistration().GetBootstrapTokenId() == "" {
		t.Fatalf("a cluster approved at registration: %s %v", got.GetApproval(), got.GetRegistration())
	}
	fh := fleetHealth(t, h)
	if fh.GetClustersTotal() != 3 || fh.GetClustersPendingApproval() != 1 || fh.GetClustersConfigSkew() != 1 {
		t.Fatalf("fleet health: %d clusters, %d pending approval, %d in config skew; want 3, 1, and 1 (the laggard alone)",
			fh.GetClustersTotal(), fh.GetClustersPendingApproval(), fh.GetClustersConfigSkew())
	}
	for _, v := range fh.GetAgentVersions() {
		if v.GetVersion() == "v6.6.6" {
			t.Errorf("the pending cluster's agent version is counted: %v", fh.GetAgentVersions())
		}
	}
	bundles, err := h.admin.ListBundles(ctx, connect.NewRequest(&fleetv1.ListBundlesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if n := bundles.Msg.GetBundles()[0].GetSelectedClusters(); n != 2 {
		t.Errorf("bundle base selects %d clusters, want the 2 approved", n)
	}
	if m := metric(t, h, h.srv.AdminToken, "kollect_hub_clusters_pending_approval"); m != 1 {
		t.Errorf("kollect_hub_clusters_pending_approval %v, want 1", m)
	}
	if strings.Contains(scrape(t, h), `kollect_hub_cluster_config_in_sync{cluster="stranger"}`) {
		t.Error("the pending cluster has a config-in-sync series, which alerts on skew would fire for")
	}
	previewStranger := &fleetv1.PreviewBundleRequest{Bundle: "base", Manifests: goodBundle, Timeout: durationpb.New(200 * time.Millisecond),
		ClusterSelector: &fleetv1.LabelSelector{MatchLabels: map[string]string{"ring": "stranger"}}}
	_, err = h.admin.PreviewBundle(ctx, connect.NewRequest(previewStranger))
	wantCode(t, err, connect.CodeFailedPrecondition, "a preview of the pending cluster alone")

	if _, err := h.admin.ApproveCluster(ctx, connect.NewRequest(&fleetv1.ApproveClusterRequest{ClusterName: "stranger"})); err != nil {
		t.Fatal(err)
	}
	// The stream is ordered: had anything been sent before the approval, it would come first.
	first := strangerStream.next(t)
	if len(first.GetBundles()) != 1 || first.GetBundles()[0].GetRevision() != 2 || first.GetConfigDigest() != rev2.GetConfigDigest() {
		t.Fatalf("the first configuration the approved cluster received: %v, want base@2 as the control cluster holds it", first)
	}
	if fh := fleetHealth(t, h); fh.GetClustersPendingApproval() != 0 || fh.GetClustersConfigSkew() != 2 {
		t.Fatalf("after the approval: %d pending, %d in config skew; want 0 and 2 (it has not applied yet)",
			fh.GetClustersPendingApproval(), fh.GetClustersConfigSkew())
	}
	reportApplied(t, stranger, first)
	if fh := fleetHealth(t, h); fh.GetClustersConfigSkew() != 1 {
		t.Fatalf("after it applied: %d in config skew, want 1", fh.GetClustersConfigSkew())
	}
	if c := clusterNamed(t, h, "stranger"); c.GetApproval() != fleetv1.ClusterApproval_CLUSTER_APPROVAL_APPROVED ||
		c.GetRegistration().GetDecidedBy() != "token:admin" || c.GetRegistration().GetDecidedAt() == nil {
		t.Fatalf("approved cluster: %s %v", c.GetApproval(), c.GetRegistration())
	}
	_, err = h.admin.ApproveCluster(ctx, connect.NewRequest(&fleetv1.ApproveClusterRequest{ClusterName: "stranger"}))
	wantCode(t, err, connect.CodeFailedPrecondition, "approving an approved cluster")
	_, err = h.admin.ApproveCluster(ctx, connect.NewRequest(&fleetv1.ApproveClusterRequest{ClusterName: "nope"}))
	wantCode(t, err, connect.CodeNotFound, "approving an unknown cluster")
	if _, err := h.admin.PreviewBundle(ctx, connect.NewRequest(previewStranger)); err != nil {
		t.Fatalf("a preview of the approved cluster: %v", err)
	}

	audit, err := h.admin.ListAuditEvents(ctx, connect.NewRequest(&fleetv1.ListAuditEventsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var approved, registered bool
	for _, e := range audit.Msg.GetEvents() {
		approved = approved || (e.GetAction() == "ApproveCluster" && e.GetActor() == "token:admin" && e.GetTarget() == "cluster/stranger" &&
			strings.Contains(e.GetDetail(), gated.GetToken().GetId()))
		registered = registered || (e.GetAction() == "Register" && e.GetTarget() == "cluster/stranger" &&
			strings.Contains(e.GetDetail(), "bootstrap_token="+gated.GetToken().GetId()) && strings.Contains(e.GetDetail(), "approval=pending"))
	}
	if !approved || !registered {
		t.Fatalf("audit log (approval %v, registration %v): %v", approved, registered, audit.Msg.GetEvents())
	}
}

// TestApprovalRejectRevokesAndBlocksTheToken: rejecting a registration revokes the agent's
// credential (its stream ends, its heartbeat is refused, where both worked before) and keeps
// the token that registered it from registering the name again, before and after an admin
// releases the name, while another token may; the rejection and the refusals are audited.
func TestApprovalRejectRevokesAndBlocksTheToken(t *testing.T) {
	t.Parallel()
	h := startHub(t, "")
	ctx := context.Background()
	gated := h.gatedToken(t)
	intruder, _ := h.register(t, gated.GetSecret(), "intruder", nil)
	stream := watchPending(t, intruder)
	eventually(t, func() error {
		if n := h.srv.Connected(); n != 1 {
			return fmt.Errorf("%d configuration streams open, want the intruder's", n)
		}
		return nil
	})
	if err := beat(t, intruder); err != nil {
		t.Fatalf("the pending cluster's heartbeat before the rejection: %v", err)
	}

	resp, err := h.admin.RejectCluster(ctx, connect.NewRequest(&fleetv1.RejectClusterRequest{ClusterName: "intruder"}))
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.Msg.GetRegistration(); r.GetBootstrapTokenId() != gated.GetToken().GetId() || r.GetDecidedBy() != "token:admin" {
		t.Fatalf("rejection names the registration %v", r)
	}
	select {
	case m := <-stream.msgs:
		t.Fatalf("the rejected cluster received %v", m)
	case err := <-stream.err:
		wantCode(t, err, connect.CodeUnauthenticated, "the rejected cluster's stream")
	case <-time.After(10 * time.Second):
		t.Fatal("the rejected cluster's stream is still open")
	}
	wantCode(t, beat(t, intruder), connect.CodeUnauthenticated, "the rejected cluster's heartbeat")
	if c := clusterNamed(t, h, "intruder"); c.GetApproval() != fleetv1.ClusterApproval_CLUSTER_APPROVAL_REJECTED ||
		c.GetState() != fleetv1.ClusterState_CLUSTER_STATE_REVOKED {
		t.Fatalf("rejected cluster: %s %s", c.GetApproval(), c.GetState())
	}
	_, err = h.admin.RejectCluster(ctx, connect.NewRequest(&fleetv1.RejectClusterRequest{ClusterName: "intruder"}))
	wantCode(t, err, connect.CodeFailedPrecondition, "rejecting a rejected cluster")

	ce := wantCode(t, register(h, gated.GetSecret(), "intruder", false), connect.CodePermissionDenied, "the rejected token, before the release")
	if !strings.Contains(ce.Message(), "rejected") {
		t.Errorf("refusal %q does not say the registration was rejected", ce.Message())
	}
	if _, err := h.admin.ReleaseCluster(ctx, connect.NewRequest(&fleetv1.ReleaseClusterRequest{ClusterName: "intruder"})); err != nil {
		t.Fatal(err)
	}
	wantCode(t, register(h, gated.GetSecret(), "intruder", false), connect.CodePermissionDenied, "the rejected token, after the release")
	// The name itself is free: another token registers it, approved at once.
	if err := register(h, h.bootstrapToken(t, time.Hour, 1, false).GetSecret(), "intruder", false); err != nil {
		t.Fatalf("another token registering the released name: %v", err)
	}
	if c := clusterNamed(t, h, "intruder"); c.GetApproval() != fleetv1.ClusterApproval_CLUSTER_APPROVAL_APPROVED {
		t.Fatalf("registered again with another token: %s", c.GetApproval())
	}
	_, err = h.admin.RejectCluster(ctx, connect.NewRequest(&fleetv1.RejectClusterRequest{ClusterName: "nope"}))
	wantCode(t, err, connect.CodeNotFound, "rejecting an unknown cluster")

	// Refusals are audited by a queue of their own, and a refusal repeated within its minute
	// is counted into the first one's event: wait for that one.
	eventually(t, func() error {
		audit, err := h.admin.ListAuditEvents(ctx, connect.NewRequest(&fleetv1.ListAuditEventsRequest{}))
		if err != nil {
			return err
		}
		var rejected bool
		refused := 0
		for _, e := range audit.Msg.GetEvents() {
			rejected = rejected || (e.GetAction() == "RejectCluster" && e.GetActor() == "token:admin" && e.GetTarget() == "cluster/intruder" &&
				strings.Contains(e.GetDetail(), "bootstrap_token="+gated.GetToken().GetId()))
			if e.GetTarget() == "procedure/Register" && strings.Contains(e.GetDetail(), "rejected") {
				refused++
			}
		}
		if !rejected || refused == 0 {
			return fmt.Errorf("audit: rejection %v, %d refused registrations: %v", rejected, refused, audit.Msg.GetEvents())
		}
		return nil
	})
}

// TestApprovalIsAdminOnly: viewers and operators are refused ApproveCluster and
// RejectCluster with PermissionDenied and the cluster stays pending; the admin's approval of
// the same cluster then goes through.
func TestApprovalIsAdminOnly(t *testing.T) {
	t.Parallel()
	h := startHub(t, "")
	ctx := context.Background()
	h.register(t, h.gatedToken(t).GetSecret(), "waiting", nil)
	for _, role := range []fleetv1.Role{fleetv1.Role_ROLE_VIEWER, fleetv1.Role_ROLE_OPERATOR} {
		c := h.apiToken(t, "as-"+role.String(), role)
		_, err := c.ApproveCluster(ctx, connect.NewRequest(&fleetv1.ApproveClusterRequest{ClusterName: "waiting"}))
		wantCode(t, err, connect.CodePermissionDenied, "ApproveCluster as "+role.String())
		_, err = c.RejectCluster(ctx, connect.NewRequest(&fleetv1.RejectClusterRequest{ClusterName: "waiting"}))
		wantCode(t, err, connect.CodePermissionDenied, "RejectCluster as "+role.String())
		// Viewers see the pending registration, with who made it.
		list, err := c.ListClusters(ctx, connect.NewRequest(&fleetv1.ListClustersRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		if got := list.Msg.GetClusters()[0]; got.GetApproval() != fleetv1.ClusterApproval_CLUSTER_APPROVAL_PENDING ||
			got.GetRegistration().GetBootstrapTokenId() == "" {
			t.Fatalf("after the refusals, as %s: %s %v", role, got.GetApproval(), got.GetRegistration())
		}
	}
	if _, err := h.admin.ApproveCluster(ctx, connect.NewRequest(&fleetv1.ApproveClusterRequest{ClusterName: "waiting"})); err != nil {
		t.Fatalf("the admin's approval: %v", err)
	}
}

// TestApprovalRequiredByTheHub: on a hub started with --require-approval a token that does
// not ask for approval registers clusters pending all the same; the token keeps saying what
// it was created with.
func TestApprovalRequiredByTheHub(t *testing.T) {
	t.Parallel()
	h := startHub(t, "", func(c *server.Config) { c.RequireApproval = true })
	tok := h.bootstrapToken(t, time.Hour, 1, false)
	if tok.GetToken().GetRequireApproval() {
		t.Fatalf("token created without require_approval: %v", tok.GetToken())
	}
	h.register(t, tok.GetSecret(), "gated-by-hub", nil)
	if c := clusterNamed(t, h, "gated-by-hub"); c.GetApproval() != fleetv1.ClusterApproval_CLUSTER_APPROVAL_PENDING {
		t.Fatalf("registered on a hub requiring approval: %s", c.GetApproval())
	}
	toks, err := h.admin.ListBootstrapTokens(context.Background(), connect.NewRequest(&fleetv1.ListBootstrapTokensRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(toks.Msg.GetTokens(), func(x *fleetv1.BootstrapToken) bool { return x.GetRequireApproval() }); i >= 0 {
		t.Fatalf("a token lists require_approval it was not created with: %v", toks.Msg.GetTokens()[i])
	}
}

// TestApprovalPendingClusterStaysOutOfRollouts: a rollout planned while a cluster of the
// selected labels waits for approval leaves it out, where the approved cluster of the same
// labels is in it (the control); once approved, the same plan includes it.
func TestApprovalPendingClusterStaysOutOfRollouts(t *testing.T) {
	t.Parallel()
	h := startHub(t, "")
	ctx := context.Background()
	for i, manifests := range []string{goodBundle, strings.Replace(goodBundle, "replicas > 0", "replicas > 1", 1)} {
		if _, err := h.admin.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{Name: "base", Manifests: manifests,
			ClusterSelector: prodOnly(), Hold: i == 1})); err != nil {
			t.Fatal(err)
		}
	}
	h.register(t, h.bootstrapToken(t, time.Hour, 1, false).GetSecret(), "control", map[string]string{"env": "prod"})
	h.register(t, h.gatedToken(t).GetSecret(), "stranger", map[string]string{"env": "prod"})
	plan := func() []string {
		t.Helper()
		resp, err := h.admin.StartRollout(ctx, connect.NewRequest(&fleetv1.StartRolloutRequest{Bundle: "base", DryRun: true}))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, c := range resp.Msg.GetRollout().GetClusters() {
			names = append(names, c.GetCluster())
		}
		slices.Sort(names)
		return names
	}
	if got := plan(); !slices.Equal(got, []string{"control"}) {
		t.Fatalf("rollout planned with a cluster pending approval: %v, want control alone", got)
	}
	if _, err := h.admin.ApproveCluster(ctx, connect.NewRequest(&fleetv1.ApproveClusterRequest{ClusterName: "stranger"})); err != nil {
		t.Fatal(err)
	}
	if got := plan(); !slices.Equal(got, []string{"control", "stranger"}) {
		t.Fatalf("rollout planned after the approval: %v, want both clusters", got)
	}
}

// TestApprovalReplacementGetsNothingOfItsPredecessor: an agent that takes over a cluster name
// with a token allowing replacement but requiring approval receives nothing of the replaced
// cluster's configuration — which the hub's last snapshot held, and the replaced agent's stream
// had received (the control) — though it opens its stream before the dispatcher's next
// snapshot (a change of configuration just before keeps the dispatcher from building one for a
// moment). Its labels select another bundle: after the approval, its first message is that one.
func TestApprovalReplacementGetsNothingOfItsPredecessor(t *testing.T) {
	t.Parallel()
	h := startHub(t, "")
	ctx := context.Background()
	if _, err := h.admin.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{Name: "base", Manifests: goodBundle,
		ClusterSelector: prodOnly()})); err != nil {
		t.Fatal(err)
	}
	old, _ := h.register(t, h.bootstrapToken(t, time.Hour, 1, false).GetSecret(), "edge", map[string]string{"env": "prod"})
	held := watch(t, old).next(t)
	if len(held.GetBundles()) != 1 || held.GetBundles()[0].GetBundle() != "base" {
		t.Fatalf("the replaced cluster's configuration: %v", held)
	}
	tok, err := h.admin.CreateBootstrapToken(ctx, connect.NewRequest(&fleetv1.CreateBootstrapTokenRequest{
		Ttl: durationpb.New(time.Hour), AllowReplace: true, RequireApproval: true}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.admin.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{Name: "dev", Manifests: goodBundle,
		ClusterSelector: &fleetv1.LabelSelector{MatchLabels: map[string]string{"env": "dev"}}})); err != nil {
		t.Fatal(err)
	}
	resp, err := h.registrar.Register(ctx, connect.NewRequest(&fleetv1.RegisterRequest{ClusterName: "edge",
		Labels: map[string]string{"env": "dev"}, BootstrapToken: tok.Msg.GetSecret(), ReplaceExisting: true}))
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Msg.GetPendingApproval() {
		t.Fatal("the replacement is not pending approval")
	}
	stream := watchPending(t, h.agent(resp.Msg.GetCredential()))
	eventually(t, func() error {
		if n := h.srv.Connected(); n != 1 {
			return fmt.Errorf("%d configuration streams open, want the replacement's alone", n)
		}
		return nil
	})
	if _, err := h.admin.ApproveCluster(ctx, connect.NewRequest(&fleetv1.ApproveClusterRequest{ClusterName: "edge"})); err != nil {
		t.Fatal(err)
	}
	// The stream is ordered: the predecessor's configuration, had it been sent, would come first.
	if first := stream.next(t); len(first.GetBundles()) != 1 || first.GetBundles()[0].GetBundle() != "dev" {
		t.Fatalf("the replacement's first message: %v, want bundle dev, sent after its approval", first)
	}
}
