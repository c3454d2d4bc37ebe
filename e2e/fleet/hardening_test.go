package fleet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"
	"kollect.dev/testenv"
)

// startHubArgs starts the shipped hub on a free loopback port with flags beyond the harness's.
func startHubArgs(t *testing.T, dir string, args ...string) *hub {
	t.Helper()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	h := &hub{t: t, dir: dir, addr: fmt.Sprintf("127.0.0.1:%d", port), args: args}
	h.start()
	t.Cleanup(h.stop)
	return h
}

// httpClient trusts the hub's CA only.
func (h *hub) httpClient() *http.Client {
	caPEM, _ := os.ReadFile(filepath.Join(h.dir, "data", "pki", "ca.crt"))
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &http.Client{Transport: &http2.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}}}
}

// agentClient returns an AgentService client sending credential ("" for Register).
func (h *hub) agentClient(credential string) fleetv1connect.AgentServiceClient {
	auth := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if credential != "" {
				req.Header().Set("Authorization", "Bearer "+credential)
			}
			return next(ctx, req)
		}
	})
	return fleetv1connect.NewAgentServiceClient(h.httpClient(), "https://"+h.addr, connect.WithInterceptors(auth))
}

// metrics GETs /metrics with token and returns the status code and the Retry-After header.
func (h *hub) metrics(t *testing.T, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "https://"+h.addr+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := h.httpClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

// TestHardenedHub drives the shipped kollect-hub and kollect CLI through what a user sees of
// the hub's hardening: /metrics only with a token; bootstrap tokens of one use by default;
// sticky revocation released with the CLI; the cap on one agent's streams and a request size
// limit; calls without a valid credential answered before their body is read, and an
// admitted call's stalled body cut after --request-read-timeout; failed authentications logged
// and audited without the secret, and refused with ResourceExhausted and a retry hint once an
// address used up its budget.
func TestHardenedHub(t *testing.T) {
	t.Parallel() // its own control planes, hub and ports: it waits alongside the others
	ctx := context.Background()
	work := t.TempDir()
	h := startHubArgs(t, work, "--auth-failure-burst", "3", "--auth-failure-interval", "2s", "--request-read-timeout", "1s")
	admin := h.fleet(h.adminToken)
	kollect := kollectCLI(t, filepath.Join(work, "hub.json"))
	must := func(want string, args ...string) {
		t.Helper()
		if out, code := kollect(args...); code != 0 || !strings.Contains(out, want) {
			t.Fatalf("kollect %s: exit %d, want %q in:\n%s", strings.Join(args, " "), code, want, out)
		}
	}
	must("logged in", "hub", "login", "--url", "https://"+h.addr, "--token", h.adminToken, "--ca-fingerprint", h.fingerprint)

	if code, _ := h.metrics(t, h.adminToken); code != http.StatusOK {
		t.Fatalf("/metrics with the admin token: %d", code)
	}

	// A bootstrap token asked for without uses or TTL allows one registration within a day.
	tok, err := admin.CreateBootstrapToken(ctx, connect.NewRequest(&fleetv1.CreateBootstrapTokenRequest{Description: "default"}))
	if err != nil {
		t.Fatal(err)
	}
	if tok.Msg.GetToken().GetMaxUses() != 1 || time.Until(tok.Msg.GetToken().GetExpiresAt().AsTime()) > 24*time.Hour {
		t.Fatalf("default bootstrap token: %v", tok.Msg.GetToken())
	}
	register := func(secret, name string) (string, error) {
		resp, err := h.agentClient("").Register(ctx, connect.NewRequest(&fleetv1.RegisterRequest{ClusterName: name, BootstrapToken: secret}))
		if err != nil {
			return "", err
		}
		return resp.Msg.GetCredential(), nil
	}
	cred, err := register(tok.Msg.GetSecret(), "east")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.agentClient(cred).ReportStatus(ctx, connect.NewRequest(&fleetv1.ReportStatusRequest{Status: &fleetv1.AgentStatus{}})); err != nil {
		t.Fatal(err)
	}

	// Revocation is sticky until the CLI releases the name.
	must("revoked the agent of east", "hub", "agent", "revoke", "east")
	more, err := admin.CreateBootstrapToken(ctx, connect.NewRequest(&fleetv1.CreateBootstrapTokenRequest{MaxUses: 2}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := register(more.Msg.GetSecret(), "east"); connect.CodeOf(err) != connect.CodeFailedPrecondition ||
		!strings.Contains(err.Error(), "kollect hub agent release east") {
		t.Fatalf("registering a revoked name: %v, want FailedPrecondition naming the release command", err)
	}
	must("released the name east", "hub", "agent", "release", "east")
	east, err := register(more.Msg.GetSecret(), "east")
	if err != nil {
		t.Fatalf("registering a released name: %v", err)
	}

	// A token bound with the CLI to a cluster name and labels registers that cluster, with those
	// labels, and nothing else.
	out, code := kollect("hub", "token", "create", "--uses", "3", "--cluster-name", "edge-1", "--labels", "env=staging")
	_, boundSecret, found := strings.Cut(out, "secret: ")
	if code != 0 || !found || !strings.Contains(out, "cluster edge-1, labels exactly env=staging") {
		t.Fatalf("kollect hub token create --cluster-name --labels: exit %d\n%s", code, out)
	}
	boundSecret = strings.TrimSpace(boundSecret)
	registerWith := func(name string, labels map[string]string) error {
		_, err := h.agentClient("").Register(ctx, connect.NewRequest(&fleetv1.RegisterRequest{ClusterName: name, BootstrapToken: boundSecret, Labels: labels}))
		return err
	}
	if err := registerWith("edge-1", map[string]string{"env": "prod"}); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("the bound token asking for env=prod: %v, want PermissionDenied", err)
	}
	if err := registerWith("rogue", map[string]string{"env": "staging"}); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("the bound token registering another name: %v, want PermissionDenied", err)
	}
	if err := registerWith("edge-1", map[string]string{"env": "staging"}); err != nil {
		t.Fatalf("the bound token's own cluster: %v", err)
	}

	// One agent may hold four configuration streams (--max-streams-per-agent); a fifth is
	// refused. A registration larger than its procedure's limit is refused before it is read.
	streams := fleetv1connect.NewAgentServiceClient(h.httpClient(), "https://"+h.addr, connect.WithInterceptors(streamBearer(east)))
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i := range 5 {
		s, err := streams.WatchConfig(sctx, connect.NewRequest(&fleetv1.WatchConfigRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		got := s.Receive()
		if i < 4 && !got {
			t.Fatalf("stream %d: %v", i+1, s.Err())
		}
		if i == 4 && (got || connect.CodeOf(s.Err()) != connect.CodeResourceExhausted) {
			t.Fatalf("a fifth stream of one agent: received=%v %v, want ResourceExhausted", got, s.Err())
		}
	}
	cancel()
	if _, err := register("kbt_"+strings.Repeat("x", 100<<10), "west"); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("a 100 KiB registration: %v, want ResourceExhausted", err)
	}

	// Three failed authentications use up the address's budget…
	const planted = "kat_planted_e2e_secret"
	if code, _ := h.metrics(t, ""); code != http.StatusUnauthorized {
		t.Fatalf("/metrics without a token: %d, want 401", code)
	}
	if code, _ := h.metrics(t, planted); code != http.StatusUnauthorized {
		t.Fatalf("/metrics with an unknown token: %d, want 401", code)
	}
	_, err = h.fleet(planted).ListClusters(ctx, connect.NewRequest(&fleetv1.ListClustersRequest{}))
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("an unknown API token: %v", err)
	}
	// …so another bad token from the same address is refused with a retry hint, while the
	// admin's good token, verified first, is served: one attacker behind an address the fleet
	// shares (a NAT, a passthrough Ingress) locks out only bad credentials.
	_, err = h.fleet(planted).ListClusters(ctx, connect.NewRequest(&fleetv1.ListClustersRequest{}))
	var ce *connect.Error
	if !asConnectError(err, &ce) || ce.Code() != connect.CodeResourceExhausted || ce.Meta().Get("Retry-After") == "" ||
		!strings.Contains(ce.Message(), "retry in") || !hasRetryInfo(ce) {
		t.Fatalf("a bad token from a blocked address: %v (Retry-After %q), want ResourceExhausted with a retry hint", err, metaOf(ce))
	}
	if code, after := h.metrics(t, planted); code != http.StatusTooManyRequests || after == "" {
		t.Fatalf("/metrics with a bad token from a blocked address: %d (Retry-After %q), want 429 with Retry-After", code, after)
	}
	if _, err := admin.ListClusters(ctx, connect.NewRequest(&fleetv1.ListClustersRequest{})); err != nil {
		t.Fatalf("the admin's good token from a blocked address: %v", err)
	}
	if code, _ := h.metrics(t, h.adminToken); code != http.StatusOK {
		t.Fatalf("/metrics with the admin's token from a blocked address: %d, want 200", code)
	}

	// Once the budget refills, the audit log holds every failure, without the secret.
	var events []*fleetv1.AuditEvent
	eventually(t, 30*time.Second, "the failed authentications audited", func() (bool, string) {
		resp, err := admin.ListAuditEvents(ctx, connect.NewRequest(&fleetv1.ListAuditEventsRequest{}))
		if err != nil {
			return false, err.Error()
		}
		events = resp.Msg.GetEvents()
		n := 0
		for _, e := range events {
			if e.GetAction() == "AuthFailed" && e.GetActor() == "peer:127.0.0.1" {
				n++
			}
		}
		return n >= 3, fmt.Sprintf("%d AuthFailed events", n)
	})
	seen := map[string]bool{}
	for _, e := range events {
		seen[e.GetAction()+" "+e.GetTarget()] = true
		if strings.Contains(e.String(), planted) {
			t.Errorf("audit event shows the presented secret: %v", e)
		}
	}
	for _, want := range []string{"AuthFailed procedure/metrics", "AuthFailed procedure/ListClusters", "RateLimited peer/127.0.0.1",
		"ReleaseCluster cluster/east", "RevokeAgent cluster/east"} {
		if !seen[want] {
			t.Errorf("the audit log lacks %q", want)
		}
	}

	// curl declares a 15 MB bundle and sends 1 KiB of it: without a valid token the hub
	// answers at once (refused, or limited while this address's budget refills) and reads no
	// more; with the admin's token it waits --request-read-timeout for the rest, then ends the
	// call with DeadlineExceeded.
	for _, token := range []string{"", planted} {
		out := curlStalled(t, h, fleetv1connect.FleetServiceApplyBundleProcedure, token)
		if !strings.Contains(out, `"code":"unauthenticated"`) && !strings.Contains(out, `"code":"resource_exhausted"`) {
			t.Fatalf("an unauthenticated bundle with a withheld body: %s", out)
		}
	}
	if out := curlStalled(t, h, fleetv1connect.FleetServiceApplyBundleProcedure, h.adminToken); !strings.Contains(out, `"code":"deadline_exceeded"`) {
		t.Fatalf("a stalled bundle body: %s, want deadline_exceeded", out)
	}
	h.stop()
	raw, _ := os.ReadFile(filepath.Join(work, "hub.log"))
	if strings.Contains(string(raw), planted) || !strings.Contains(string(raw), "call refused") {
		t.Errorf("the hub's log shows the presented secret, or no refusal:\n%s", tail(string(raw), 30))
	}
}

func asConnectError(err error, ce **connect.Error) bool {
	c, ok := err.(*connect.Error)
	if ok {
		*ce = c
	}
	return ok
}

func metaOf(ce *connect.Error) string {
	if ce == nil {
		return ""
	}
	return ce.Meta().Get("Retry-After")
}

// hasRetryInfo reports whether ce carries a google.rpc.RetryInfo detail.
func hasRetryInfo(ce *connect.Error) bool {
	for _, d := range ce.Details() {
		if d.Type() == "google.rpc.RetryInfo" {
			return true
		}
	}
	return false
}

// streamBearer sends "Authorization: Bearer <credential>" on streams.
type streamBearer string

func (b streamBearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return next }

func (b streamBearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", "Bearer "+string(b))
		return conn
	}
}

func (b streamBearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
