package server_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"kollect.dev/hub/internal/auth"
	"kollect.dev/hub/internal/ratelimit"
	"kollect.dev/hub/internal/server"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"
)

// wantExhausted fails unless err is ResourceExhausted with a retry hint: a RetryInfo detail
// and a Retry-After header of want.
func wantExhausted(t *testing.T, err error, want time.Duration, what string) {
	t.Helper()
	ce := wantCode(t, err, connect.CodeResourceExhausted, what)
	if got := auth.RetryAfter(err); got != want {
		t.Errorf("%s: RetryInfo says %v, want %v", what, got, want)
	}
	if got := ce.Meta().Get("Retry-After"); got != "60" {
		t.Errorf("%s: Retry-After %q, want 60", what, got)
	}
	if !strings.Contains(ce.Message(), "retry in 1m0s") {
		t.Errorf("%s: message %q does not say when to retry", what, ce.Message())
	}
}

// TestFailedAuthenticationsAreLimitedAndAudited: failed authentications from one address, on
// every service and /metrics, use up that address's budget; then its calls, even with a good
// token, are refused with ResourceExhausted and a retry hint before any lookup, until the
// budget refills. Every failure is audited with the address and the reason, never the secret.
func TestFailedAuthenticationsAreLimitedAndAudited(t *testing.T) {
	t.Parallel()
	h := startHub(t, "", func(c *server.Config) {
		c.AuthFailureLimit = ratelimit.Limit{Burst: 4, Interval: time.Minute}
	})
	ctx := context.Background()
	const badAPI, badAgent, badBootstrap, badMetrics = "kat_planted_one", "kag_planted_two", "kbt_planted_three", "kat_planted_four"

	_, err := h.fleet(badAPI).ListClusters(ctx, connect.NewRequest(&fleetv1.ListClustersRequest{}))
	wantCode(t, err, connect.CodeUnauthenticated, "an unknown API token")
	_, err = h.agent(badAgent).ReportStatus(ctx, connect.NewRequest(&fleetv1.ReportStatusRequest{Status: &fleetv1.AgentStatus{}}))
	wantCode(t, err, connect.CodeUnauthenticated, "an unknown agent credential")
	_, _, err = h.tryRegister(badBootstrap, "x", nil)
	wantCode(t, err, connect.CodeUnauthenticated, "an unknown bootstrap token")
	if code := getMetrics(t, h, badMetrics); code != http.StatusUnauthorized {
		t.Fatalf("/metrics with an unknown token: %d", code)
	}

	// The budget is spent: bad credentials from the address are refused as exhausted, while
	// good ones are verified first and served (an attacker sharing an address with the fleet,
	// behind a NAT or a passthrough Ingress, cannot lock it out).
	_, err = h.fleet(badAPI).ListClusters(ctx, connect.NewRequest(&fleetv1.ListClustersRequest{}))
	wantExhausted(t, err, time.Minute, "a bad token from a blocked address")
	_, err = h.agent(badAgent).ReportStatus(ctx, connect.NewRequest(&fleetv1.ReportStatusRequest{Status: &fleetv1.AgentStatus{}}))
	wantExhausted(t, err, time.Minute, "a bad agent credential from a blocked address")
	_, _, err = h.tryRegister(badBootstrap, "x", nil)
	wantExhausted(t, err, time.Minute, "a bad registration from a blocked address")
	if code := getMetrics(t, h, badMetrics); code != http.StatusTooManyRequests {
		t.Fatalf("/metrics with a bad token from a blocked address: %d, want 429", code)
	}
	if _, err = h.admin.ListClusters(ctx, connect.NewRequest(&fleetv1.ListClustersRequest{})); err != nil {
		t.Fatalf("the admin's good token from a blocked address: %v", err)
	}
	if code := getMetrics(t, h, h.srv.AdminToken); code != http.StatusOK {
		t.Fatalf("/metrics with a good token from a blocked address: %d, want 200", code)
	}
	tok := h.bootstrapToken(t, time.Hour, 1, false)
	if _, _, err = h.tryRegister(tok.GetSecret(), "good", nil); err != nil {
		t.Fatalf("a registration with a good token from a blocked address: %v", err)
	}

	h.clock.Advance(time.Minute)
	var events []*fleetv1.AuditEvent
	eventually(t, func() error {
		resp, err := h.admin.ListAuditEvents(ctx, connect.NewRequest(&fleetv1.ListAuditEventsRequest{}))
		if err != nil {
			return err
		}
		events = resp.Msg.GetEvents()
		n := 0
		for _, e := range events {
			if e.GetAction() == auth.AuditFailed || e.GetAction() == auth.AuditRateLimited {
				n++
			}
		}
		if n != 5 {
			return fmt.Errorf("%d failure events audited, want 4 failures and 1 rate limit: %v", n, events)
		}
		return nil
	})
	want := map[string]bool{"AuthFailed procedure/ListClusters": false, "AuthFailed procedure/ReportStatus": false,
		"AuthFailed procedure/Register": false, "AuthFailed procedure/metrics": false, "RateLimited peer/127.0.0.1": false}
	for _, e := range events {
		key := e.GetAction() + " " + e.GetTarget()
		if _, ok := want[key]; ok {
			want[key] = true
			if e.GetActor() != "peer:127.0.0.1" || e.GetDetail() == "" {
				t.Errorf("audit event %v: want actor peer:127.0.0.1 and a reason", e)
			}
		}
		for _, secret := range []string{badAPI, badAgent, badBootstrap, badMetrics} {
			if strings.Contains(e.String(), secret) {
				t.Errorf("audit event %v shows a presented secret", e)
			}
		}
	}
	for k, seen := range want {
		if !seen {
			t.Errorf("no audit event %q in %v", k, events)
		}
	}
}

// TestRegistrationsAreLimitedPerAddress: past its burst an address's registrations are refused
// with ResourceExhausted before the handler reads the token, so the token keeps its uses.
func TestRegistrationsAreLimitedPerAddress(t *testing.T) {
	t.Parallel()
	h := startHub(t, "", func(c *server.Config) { c.RegisterLimit = ratelimit.Limit{Burst: 2, Interval: time.Minute} })
	tok := h.bootstrapToken(t, time.Hour, 5, false)
	h.register(t, tok.GetSecret(), "one", nil)
	h.register(t, tok.GetSecret(), "two", nil)
	_, _, err := h.tryRegister(tok.GetSecret(), "three", nil)
	wantExhausted(t, err, time.Minute, "a third registration")
	list, err := h.admin.ListBootstrapTokens(context.Background(), connect.NewRequest(&fleetv1.ListBootstrapTokensRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if uses := list.Msg.GetTokens()[0].GetUses(); uses != 2 {
		t.Fatalf("the token was used %d times, want 2: the limited registration reached the store", uses)
	}
	h.clock.Advance(time.Minute)
	h.register(t, tok.GetSecret(), "three", nil)
}

func getMetrics(t *testing.T, h *testHub, token string) int {
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
	resp.Body.Close()
	if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") != "60" {
		t.Errorf("429 without Retry-After: 60 (%q)", resp.Header.Get("Retry-After"))
	}
	return resp.StatusCode
}

// from is a FleetService client whose calls come from local address ip (any of 127.0.0.0/8
// reaches the hub on loopback), presenting token.
func (h *testHub) from(t *testing.T, ip, token string) fleetv1connect.FleetServiceClient {
	t.Helper()
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: h.tls.Clone(), ForceAttemptHTTP2: true, DialContext: dialer.DialContext}}
	t.Cleanup(hc.CloseIdleConnections)
	return fleetv1connect.NewFleetServiceClient(hc, h.url, connect.WithInterceptors(bearer(token)))
}

// TestFailedAuthenticationsAreLimitedPerCredential: one bad credential tried from many
// addresses (a stolen or revoked token on a botnet) uses up its own budget, though no address
// used up its: then it is refused as exhausted from every address, while another bad
// credential and the admin's good token from a fresh address are still decided as usual.
func TestFailedAuthenticationsAreLimitedPerCredential(t *testing.T) {
	t.Parallel()
	h := startHub(t, "", func(c *server.Config) {
		c.AuthFailureLimit = ratelimit.Limit{Burst: 4, Interval: time.Minute}
	})
	ctx := context.Background()
	const stolen, other = "kat_planted_stolen", "kat_planted_other"
	list := func(c fleetv1connect.FleetServiceClient) error {
		_, err := c.ListClusters(ctx, connect.NewRequest(&fleetv1.ListClustersRequest{}))
		return err
	}
	for i := 2; i <= 5; i++ {
		ip := fmt.Sprintf("127.0.0.%d", i)
		wantCode(t, list(h.from(t, ip, stolen)), connect.CodeUnauthenticated, "the stolen token from "+ip)
	}
	wantExhausted(t, list(h.from(t, "127.0.0.6", stolen)), time.Minute, "the stolen token from a fresh address")
	wantCode(t, list(h.from(t, "127.0.0.6", other)), connect.CodeUnauthenticated, "another bad token from that address")
	if err := list(h.from(t, "127.0.0.7", h.srv.AdminToken)); err != nil {
		t.Fatalf("the admin's good token: %v", err)
	}
	eventually(t, func() error {
		resp, err := h.admin.ListAuditEvents(ctx, connect.NewRequest(&fleetv1.ListAuditEventsRequest{}))
		if err != nil {
			return err
		}
		for _, e := range resp.Msg.GetEvents() {
			if e.GetAction() == auth.AuditRateLimited && strings.HasPrefix(e.GetTarget(), "credential:") {
				if strings.Contains(e.String(), stolen) {
					t.Errorf("audit event %v shows the presented secret", e)
				}
				return nil
			}
		}
		return fmt.Errorf("no RateLimited event for the credential in %v", resp.Msg.GetEvents())
	})
	h.clock.Advance(time.Minute)
	wantCode(t, list(h.from(t, "127.0.0.6", stolen)), connect.CodeUnauthenticated, "the stolen token once its budget refilled")
}
