package server_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"kollect.dev/hub/internal/pki"
	"kollect.dev/hub/internal/server"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"
)

func register(h *testHub, token, name string, replace bool) error {
	_, err := h.agent("").Register(context.Background(), connect.NewRequest(&fleetv1.RegisterRequest{
		ClusterName: name, BootstrapToken: token, ReplaceExisting: replace}))
	return err
}

func TestBootstrapTokenRules(t *testing.T) {
	t.Parallel()
	h := startHub(t, "")
	once := h.bootstrapToken(t, time.Hour, 1, false)
	h.register(t, once.GetSecret(), "alpha", map[string]string{"env": "prod"})
	wantCode(t, register(h, once.GetSecret(), "beta", false), connect.CodeUnauthenticated, "used-up token")

	short := h.bootstrapToken(t, time.Minute, 0, false)
	h.clock.Advance(2 * time.Minute)
	wantCode(t, register(h, short.GetSecret(), "beta", false), connect.CodeUnauthenticated, "expired token")

	revoked := h.bootstrapToken(t, time.Hour, 0, false)
	if _, err := h.admin.RevokeBootstrapToken(context.Background(), connect.NewRequest(
		&fleetv1.RevokeBootstrapTokenRequest{Id: revoked.GetToken().GetId()})); err != nil {
		t.Fatal(err)
	}
	wantCode(t, register(h, revoked.GetSecret(), "beta", false), connect.CodeUnauthenticated, "revoked token")
	wantCode(t, register(h, "kbt_made_up", "beta", false), connect.CodeUnauthenticated, "unknown token")
	wantCode(t, register(h, revoked.GetSecret(), "Not_A_Name", false), connect.CodeInvalidArgument, "bad cluster name")

	list, err := h.admin.ListBootstrapTokens(context.Background(), connect.NewRequest(&fleetv1.ListBootstrapTokensRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range list.Msg.GetTokens() {
		if tok.GetId() == once.GetToken().GetId() && tok.GetUses() != 1 {
			t.Errorf("single-use token used %d times", tok.GetUses())
		}
	}
	// Every change is in the audit log, with who made it.
	audit, err := h.admin.ListAuditEvents(context.Background(), connect.NewRequest(&fleetv1.ListAuditEventsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range audit.Msg.GetEvents() {
		got = append(got, e.GetActor()+" "+e.GetAction())
	}
	joined := strings.Join(got, "\n")
	for _, want := range []string{"token:admin RevokeBootstrapToken", "cluster:alpha Register", "token:admin CreateBootstrapToken", "hub CreateAPIToken"} {
		if !strings.Contains(joined, want) {
			t.Errorf("audit log lacks %q:\n%s", want, joined)
		}
	}
}

func TestDuplicateClusterAndReplacement(t *testing.T) {
	t.Parallel()
	h := startHub(t, "")
	plain := h.bootstrapToken(t, time.Hour, 0, false)
	first, _ := h.register(t, plain.GetSecret(), "alpha", nil)
	// The first agent uses its credential, as every agent does at once after registering: a
	// registration with the same token is no longer the retry of an agent that lost it
	// (TestRegistrationRetryCompletes) but a second agent.
	if _, err := first.ReportStatus(context.Background(), connect.NewRequest(&fleetv1.ReportStatusRequest{Status: &fleetv1.AgentStatus{}})); err != nil {
		t.Fatal(err)
	}
	ce := wantCode(t, register(h, plain.GetSecret(), "alpha", false), connect.CodeAlreadyExists, "second agent for alpha")
	if !strings.Contains(ce.Message(), "allow_replace") {
		t.Errorf("refusal does not say how to replace: %q", ce.Message())
	}
	wantCode(t, register(h, plain.GetSecret(), "alpha", true), connect.CodeAlreadyExists, "replace with a plain token")

	replacer := h.bootstrapToken(t, time.Hour, 0, true)
	if err := register(h, replacer.GetSecret(), "alpha", true); err != nil {
		t.Fatalf("replacement: %v", err)
	}
	_, err := first.ReportStatus(context.Background(), connect.NewRequest(&fleetv1.ReportStatusRequest{Status: &fleetv1.AgentStatus{}}))
	wantCode(t, err, connect.CodeUnauthenticated, "replaced agent's heartbeat")
}

func TestRevokedAgentRefusedOnNextCall(t *testing.T) {
	t.Parallel()
	h := startHub(t, "")
	tok := h.bootstrapToken(t, time.Hour, 0, false)
	agent, _ := h.register(t, tok.GetSecret(), "alpha", nil)
	stream := watch(t, agent)
	stream.next(t)
	if _, err := agent.ReportStatus(context.Background(), connect.NewRequest(&fleetv1.ReportStatusRequest{
		Status: &fleetv1.AgentStatus{AgentVersion: "v0.1.0"}})); err != nil {
		t.Fatal(err)
	}
	if _, err := h.admin.RevokeAgent(context.Background(), connect.NewRequest(&fleetv1.RevokeAgentRequest{ClusterName: "alpha"})); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-stream.err:
		wantCode(t, err, connect.CodeUnauthenticated, "open stream after revocation")
	case <-time.After(10 * time.Second):
		t.Fatal("the revoked agent's stream stayed open")
	}
	_, err := agent.ReportStatus(context.Background(), connect.NewRequest(&fleetv1.ReportStatusRequest{Status: &fleetv1.AgentStatus{}}))
	wantCode(t, err, connect.CodeUnauthenticated, "heartbeat after revocation")
	s, err := agent.WatchConfig(context.Background(), connect.NewRequest(&fleetv1.WatchConfigRequest{}))
	if err == nil {
		for s.Receive() {
			t.Fatal("revoked agent received configuration")
		}
		err = s.Err()
	}
	wantCode(t, err, connect.CodeUnauthenticated, "new stream after revocation")
	// Revocation is sticky: the name stays blocked for every token, even one allowing
	// replacement, and the refusal says how to release it…
	replacer := h.bootstrapToken(t, time.Hour, 0, true)
	for _, secret := range []string{tok.GetSecret(), replacer.GetSecret()} {
		ce := wantCode(t, register(h, secret, "alpha", true), connect.CodeFailedPrecondition, "registering a revoked name")
		if !strings.Contains(ce.Message(), "kollect hub agent release alpha") {
			t.Errorf("refusal %q does not say how to release the name", ce.Message())
		}
	}
	ctx := context.Background()
	_, err = h.admin.ReleaseCluster(ctx, connect.NewRequest(&fleetv1.ReleaseClusterRequest{ClusterName: "beta"}))
	wantCode(t, err, connect.CodeNotFound, "releasing an unknown cluster")
	// …until an admin releases it (audited); then a rebuilt cluster registers with a new credential.
	if _, err := h.admin.ReleaseCluster(ctx, connect.NewRequest(&fleetv1.ReleaseClusterRequest{ClusterName: "alpha"})); err != nil {
		t.Fatal(err)
	}
	h.register(t, tok.GetSecret(), "alpha", nil)
	_, err = h.admin.ReleaseCluster(ctx, connect.NewRequest(&fleetv1.ReleaseClusterRequest{ClusterName: "alpha"}))
	wantCode(t, err, connect.CodeFailedPrecondition, "releasing a live cluster")
	audit, err := h.admin.ListAuditEvents(ctx, connect.NewRequest(&fleetv1.ListAuditEventsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	released := false
	for _, e := range audit.Msg.GetEvents() {
		released = released || (e.GetActor() == "token:admin" && e.GetAction() == "ReleaseCluster" && e.GetTarget() == "cluster/alpha")
	}
	if !released {
		t.Errorf("the release is not audited: %v", audit.Msg.GetEvents())
	}
}

func TestRolesAreEnforced(t *testing.T) {
	t.Parallel()
	h := startHub(t, "")
	ctx := context.Background()
	viewer := h.apiToken(t, "dashboard", fleetv1.Role_ROLE_VIEWER)
	operator := h.apiToken(t, "ci", fleetv1.Role_ROLE_OPERATOR)
	apply := connect.NewRequest(&fleetv1.ApplyBundleRequest{Name: "base", Manifests: goodBundle})

	_, err := viewer.ApplyBundle(ctx, apply)
	ce := wantCode(t, err, connect.CodePermissionDenied, "viewer applying a bundle")
	if !strings.Contains(ce.Message(), "needs role operator") {
		t.Errorf("message: %q", ce.Message())
	}
	if _, err := viewer.ListClusters(ctx, connect.NewRequest(&fleetv1.ListClustersRequest{})); err != nil {
		t.Errorf("viewer listing clusters: %v", err)
	}
	if _, err := operator.ApplyBundle(ctx, apply); err != nil {
		t.Fatalf("operator applying a bundle: %v", err)
	}
	_, err = operator.CreateAPIToken(ctx, connect.NewRequest(&fleetv1.CreateAPITokenRequest{Name: "x", Role: fleetv1.Role_ROLE_ADMIN}))
	wantCode(t, err, connect.CodePermissionDenied, "operator creating a token")
	_, err = h.fleet("").ListBundles(ctx, connect.NewRequest(&fleetv1.ListBundlesRequest{}))
	wantCode(t, err, connect.CodeUnauthenticated, "no token")
	_, err = h.fleet("kat_wrong").ListBundles(ctx, connect.NewRequest(&fleetv1.ListBundlesRequest{}))
	wantCode(t, err, connect.CodeUnauthenticated, "unknown token")

	toks, err := h.admin.ListAPITokens(ctx, connect.NewRequest(&fleetv1.ListAPITokensRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range toks.Msg.GetTokens() {
		switch tok.GetName() {
		case "ci":
			if _, err := h.admin.RevokeAPIToken(ctx, connect.NewRequest(&fleetv1.RevokeAPITokenRequest{Id: tok.GetId()})); err != nil {
				t.Fatal(err)
			}
		case "admin":
			_, err := h.admin.RevokeAPIToken(ctx, connect.NewRequest(&fleetv1.RevokeAPITokenRequest{Id: tok.GetId()}))
			wantCode(t, err, connect.CodeFailedPrecondition, "admin revoking itself")
		}
	}
	_, err = operator.ListBundles(ctx, connect.NewRequest(&fleetv1.ListBundlesRequest{}))
	wantCode(t, err, connect.CodeUnauthenticated, "revoked token")

	audit, err := viewer.ListAuditEvents(ctx, connect.NewRequest(&fleetv1.ListAuditEventsRequest{Limit: 10}))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range audit.Msg.GetEvents() {
		if e.GetActor() == "token:ci" && e.GetAction() == "ApplyBundle" && e.GetTarget() == "bundle/base@1" {
			found = true
		}
		if e.GetAction() == "ListBundles" {
			t.Errorf("a read was audited: %v", e)
		}
	}
	if !found {
		t.Errorf("ApplyBundle by ci not audited: %v", audit.Msg.GetEvents())
	}
}

// TestRestartKeepsIdentity restarts a hub on its data directory: same CA, same admin token,
// and no second admin token.
func TestRestartKeepsIdentity(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := startHub(t, dir)
	fp, admin := first.srv.Identity().Fingerprint, first.srv.AdminToken
	raw, err := os.ReadFile(filepath.Join(dir, "admin-token"))
	if err != nil || strings.TrimSpace(string(raw)) != admin {
		t.Fatalf("admin-token file: %q, %v", raw, err)
	}
	if raw, err := os.ReadFile(filepath.Join(dir, "ca-fingerprint")); err != nil || strings.TrimSpace(string(raw)) != fp {
		t.Fatalf("ca-fingerprint file: %q, %v", raw, err)
	}
	first.stop()
	second := startHub(t, dir)
	if second.srv.AdminToken != "" {
		t.Error("a second admin token was created on restart")
	}
	if second.srv.Identity().Fingerprint != fp {
		t.Error("CA fingerprint changed across a restart")
	}
	if _, err := second.fleet(admin).ListAPITokens(context.Background(), connect.NewRequest(&fleetv1.ListAPITokensRequest{})); err != nil {
		t.Fatalf("first admin token after restart: %v", err)
	}
}

// TestProtocols calls the hub with each of Connect's three wire protocols.
func TestProtocols(t *testing.T) {
	t.Parallel()
	h := startHub(t, "")
	for name, opt := range map[string][]connect.ClientOption{
		"connect":  nil,
		"grpc":     {connect.WithGRPC()},
		"grpc-web": {connect.WithGRPCWeb()},
	} {
		c := h.fleet(h.srv.AdminToken, opt...)
		if _, err := c.GetFleetHealth(context.Background(), connect.NewRequest(&fleetv1.GetFleetHealthRequest{})); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		// The agent's server stream works over every protocol too.
		tok := h.bootstrapToken(t, time.Hour, 1, false)
		_, cred := h.register(t, tok.GetSecret(), "via-"+name, nil)
		agent := fleetv1connect.NewAgentServiceClient(h.httpClient(), h.url, append(opt, connect.WithInterceptors(bearer(cred)))...)
		if first := watch(t, agent).next(t); first.GetConfigDigest() == "" {
			t.Errorf("%s: WatchConfig sent %v", name, first)
		}
	}
}

// TestBringYourOwnCertificate serves a certificate chain the operator brings; agents pin the
// last certificate of the chain (its CA).
func TestBringYourOwnCertificate(t *testing.T) {
	t.Parallel()
	ca, err := pki.LoadOrCreate(t.TempDir(), []string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	chain := filepath.Join(dir, "chain.pem")
	key := filepath.Join(dir, "key.pem")
	var pemChain []byte
	for _, der := range ca.Certificate.Certificate {
		pemChain = append(pemChain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(ca.Certificate.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(chain, pemChain, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	hubDir := t.TempDir()
	h := startHub(t, hubDir, func(c *server.Config) { c.TLSCert, c.TLSKey = chain, key })
	if h.srv.Identity().Fingerprint != ca.Fingerprint {
		t.Fatalf("fingerprint %s, want the brought CA's %s", h.srv.Identity().Fingerprint, ca.Fingerprint)
	}
	if _, err := os.Stat(filepath.Join(hubDir, "pki")); !os.IsNotExist(err) {
		t.Errorf("the hub made its own CA although a certificate was brought: %v", err)
	}
	if _, err := h.admin.ListClusters(context.Background(), connect.NewRequest(&fleetv1.ListClustersRequest{})); err != nil {
		t.Fatalf("call over the brought certificate: %v", err)
	}
}

// TestDataDirectoryIsPrivate: a data directory that exists with a mode open to others is
// closed (0700), and the first admin token is written 0600 even over a world-readable file
// left behind.
func TestDataDirectoryIsPrivate(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "admin-token"), []byte("stale\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := startHub(t, dir)
	for name, want := range map[string]os.FileMode{".": 0o700, "admin-token": 0o600, "hub.db": 0o600, "pki/ca.key": 0o600} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s is %v, want %v", name, fi.Mode().Perm(), want)
		}
	}
	raw, err := os.ReadFile(filepath.Join(dir, "admin-token"))
	if err != nil || strings.TrimSpace(string(raw)) != h.srv.AdminToken {
		t.Fatalf("admin-token holds %q (%v), want the new admin token", raw, err)
	}
}

// TestClusterNameMustMatchCredential: a credential issued for alpha is refused, with both
// names, when the agent holding it runs as beta — on heartbeats and on the configuration
// stream — and nothing of the call is recorded; its own name and no name (older agents) pass.
func TestClusterNameMustMatchCredential(t *testing.T) {
	t.Parallel()
	h := startHub(t, "")
	tok := h.bootstrapToken(t, time.Hour, 0, false)
	alpha, _ := h.register(t, tok.GetSecret(), "alpha", nil)
	ctx := context.Background()
	for _, name := range []string{"alpha", ""} {
		if _, err := alpha.ReportStatus(ctx, connect.NewRequest(&fleetv1.ReportStatusRequest{ClusterName: name,
			Status: &fleetv1.AgentStatus{AgentVersion: "v0.1.0"}})); err != nil {
			t.Fatalf("heartbeat as %q: %v", name, err)
		}
	}
	ce := wantCode(t, func() error {
		_, err := alpha.ReportStatus(ctx, connect.NewRequest(&fleetv1.ReportStatusRequest{ClusterName: "beta",
			Status: &fleetv1.AgentStatus{AgentVersion: "v9.9.9"}}))
		return err
	}(), connect.CodeFailedPrecondition, "heartbeat as beta with alpha's credential")
	for _, want := range []string{"--cluster-name beta", "issued for cluster alpha"} {
		if !strings.Contains(ce.Message(), want) {
			t.Errorf("refusal %q lacks %q", ce.Message(), want)
		}
	}
	got, err := h.admin.GetCluster(ctx, connect.NewRequest(&fleetv1.GetClusterRequest{Name: "alpha"}))
	if err != nil {
		t.Fatal(err)
	}
	if v := got.Msg.GetCluster().GetAgentVersion(); v != "v0.1.0" {
		t.Errorf("the refused heartbeat was recorded: agent version %q", v)
	}
	if _, err := h.admin.GetCluster(ctx, connect.NewRequest(&fleetv1.GetClusterRequest{Name: "beta"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("cluster beta: %v, want NotFound", err)
	}

	stream, err := alpha.WatchConfig(ctx, connect.NewRequest(&fleetv1.WatchConfigRequest{ClusterName: "beta"}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if stream.Receive() {
		t.Fatalf("the stream of alpha's credential running as beta sent %v", stream.Msg())
	}
	ce = wantCode(t, stream.Err(), connect.CodeFailedPrecondition, "config stream as beta with alpha's credential")
	if !strings.Contains(ce.Message(), "--cluster-name beta") || !strings.Contains(ce.Message(), "cluster alpha") {
		t.Errorf("stream refusal %q does not name both clusters", ce.Message())
	}
	ok, err := alpha.WatchConfig(ctx, connect.NewRequest(&fleetv1.WatchConfigRequest{ClusterName: "alpha"}))
	if err != nil {
		t.Fatal(err)
	}
	defer ok.Close()
	if !ok.Receive() {
		t.Fatalf("alpha's own stream: %v", ok.Err())
	}
}
