package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"kollect.dev/hub/internal/server"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"
)

// TestBootstrapTokenDefaults: a token created without a TTL or a number of uses allows one
// registration within 24 h; a token asking for more than the hub's ceilings is refused with a
// message naming the flag that sets them.
func TestBootstrapTokenDefaults(t *testing.T) {
	t.Parallel()
	h := startHub(t, "", func(c *server.Config) { c.BootstrapMaxTTL, c.BootstrapMaxUses = 48*time.Hour, 5 })
	ctx := context.Background()
	before := h.clock.Now()
	resp, err := h.admin.CreateBootstrapToken(ctx, connect.NewRequest(&fleetv1.CreateBootstrapTokenRequest{Description: "defaults"}))
	if err != nil {
		t.Fatal(err)
	}
	tok := resp.Msg.GetToken()
	if tok.GetMaxUses() != 1 {
		t.Errorf("max_uses %d, want 1", tok.GetMaxUses())
	}
	if exp := tok.GetExpiresAt().AsTime(); exp.Before(before.Add(24*time.Hour)) || exp.After(h.clock.Now().Add(24*time.Hour)) {
		t.Errorf("expires at %v, want 24 h after %v", exp, before)
	}
	h.register(t, resp.Msg.GetSecret(), "first", nil)
	wantCode(t, register(h, resp.Msg.GetSecret(), "second", false), connect.CodeUnauthenticated, "a second registration with a default token")

	for _, c := range []struct {
		req  *fleetv1.CreateBootstrapTokenRequest
		flag string
	}{
		{&fleetv1.CreateBootstrapTokenRequest{Ttl: durationpb.New(72 * time.Hour)}, "--bootstrap-token-max-ttl"},
		{&fleetv1.CreateBootstrapTokenRequest{MaxUses: 6}, "--bootstrap-token-max-uses"},
	} {
		_, err := h.admin.CreateBootstrapToken(ctx, connect.NewRequest(c.req))
		ce := wantCode(t, err, connect.CodeInvalidArgument, "a token beyond the ceiling")
		if !strings.Contains(ce.Message(), c.flag) {
			t.Errorf("refusal %q does not name %s", ce.Message(), c.flag)
		}
	}
	if _, err := h.admin.CreateBootstrapToken(ctx, connect.NewRequest(&fleetv1.CreateBootstrapTokenRequest{
		Ttl: durationpb.New(48 * time.Hour), MaxUses: 5})); err != nil {
		t.Fatalf("a token at the ceilings: %v", err)
	}
}

// TestRegistrationRetryCompletes: an agent that registered but could not store its
// credential registers again with the same token and registration key and gets a working
// credential instead of "already registered"; the lost credential stops working. Without the
// key or with another (another holder of the token), once the credential was used, or after
// the retry window, the same retry is refused.
func TestRegistrationRetryCompletes(t *testing.T) {
	t.Parallel()
	h := startHub(t, "", func(c *server.Config) { c.RegisterRetryWindow = 10 * time.Minute })
	ctx := context.Background()
	once := h.bootstrapToken(t, time.Hour, 1, false).GetSecret()
	const key = "agent-alpha-0123456789abcdef"
	withKey := func(token, name, key string, labels map[string]string) (fleetv1connect.AgentServiceClient, error) {
		resp, err := h.registrar.Register(ctx, connect.NewRequest(&fleetv1.RegisterRequest{ClusterName: name, Labels: labels,
			BootstrapToken: token, RegistrationKey: key}))
		if err != nil {
			return nil, err
		}
		return h.agent(resp.Msg.GetCredential()), nil
	}
	lost, err := withKey(once, "alpha", key, map[string]string{"try": "1"})
	if err != nil {
		t.Fatal(err)
	}
	// Without the registration key, or with another, a retry is another holder of the token.
	_, err = withKey(once, "alpha", "", nil)
	wantCode(t, err, connect.CodeUnauthenticated, "a retry without the registration key")
	_, err = withKey(once, "alpha", "thief-0123456789abcdefgh", nil)
	wantCode(t, err, connect.CodeUnauthenticated, "a retry with another registration key")
	_, err = withKey(once, "alpha", "short", nil)
	wantCode(t, err, connect.CodeInvalidArgument, "a registration key too short to be secret")
	agent, err := withKey(once, "alpha", key, map[string]string{"try": "2"})
	if err != nil {
		t.Fatalf("the retry with the registration key: %v", err)
	}
	heartbeat := func(a fleetv1connect.AgentServiceClient) error {
		_, err := a.ReportStatus(ctx, connect.NewRequest(&fleetv1.ReportStatusRequest{Status: &fleetv1.AgentStatus{AgentVersion: "v0.1.0"}}))
		return err
	}
	wantCode(t, heartbeat(lost), connect.CodeUnauthenticated, "the credential the retry replaced")
	if err := heartbeat(agent); err != nil {
		t.Fatalf("the retried registration's credential: %v", err)
	}
	c, err := h.admin.GetCluster(ctx, connect.NewRequest(&fleetv1.GetClusterRequest{Name: "alpha"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Msg.GetCluster().GetLabels()["try"] != "2" {
		t.Errorf("labels %v, want the retry's", c.Msg.GetCluster().GetLabels())
	}
	// The credential is in use now: a third registration is refused.
	wantCode(t, register(h, once, "alpha", false), connect.CodeUnauthenticated, "a registration after the credential was used")

	// With a token of several uses, another holder is refused the name (it is taken) while
	// the agent with the key completes its registration.
	shared := h.bootstrapToken(t, time.Hour, 3, false).GetSecret()
	if _, err := withKey(shared, "gamma", key, nil); err != nil {
		t.Fatal(err)
	}
	_, err = withKey(shared, "gamma", "thief-0123456789abcdefgh", nil)
	wantCode(t, err, connect.CodeAlreadyExists, "another holder of a shared token taking a new cluster's name")
	if _, err := withKey(shared, "gamma", key, nil); err != nil {
		t.Fatalf("the retry of the shared token's registration: %v", err)
	}

	// Past the window the retry is refused too.
	late := h.bootstrapToken(t, time.Hour, 1, false).GetSecret()
	if _, err := withKey(late, "beta", key, nil); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(11 * time.Minute)
	_, err = withKey(late, "beta", key, nil)
	wantCode(t, err, connect.CodeUnauthenticated, "a retry past the window")

	audit, err := h.admin.ListAuditEvents(ctx, connect.NewRequest(&fleetv1.ListAuditEventsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	retried := 0
	for _, e := range audit.Msg.GetEvents() {
		if e.GetAction() == "Register" && strings.Contains(e.GetDetail(), "retry=true") {
			retried++
		}
	}
	if retried != 2 {
		t.Errorf("%d registrations audited as retries, want 2: %v", retried, audit.Msg.GetEvents())
	}
}
