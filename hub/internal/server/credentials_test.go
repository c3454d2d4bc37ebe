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

func heartbeat(t *testing.T, a fleetv1connect.AgentServiceClient) (*fleetv1.ReportStatusResponse, error) {
	t.Helper()
	resp, err := a.ReportStatus(context.Background(), connect.NewRequest(&fleetv1.ReportStatusRequest{
		Status: &fleetv1.AgentStatus{AgentVersion: "v0.1.0"}}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// TestCredentialRotation: an agent credential expires; past half its life the hub asks for
// rotation in the heartbeat answer, RotateCredential hands out a new one over the same
// connection, the old one keeps working for the grace period (an open stream keeps receiving
// configuration), and after that, and after the new one's own expiry, they are refused.
func TestCredentialRotation(t *testing.T) {
	t.Parallel()
	h := startHub(t, "", func(c *server.Config) {
		c.AgentCredentialTTL, c.AgentCredentialGrace = time.Hour, 10*time.Minute
		c.CredentialRecheck = 50 * time.Millisecond
	})
	ctx := context.Background()
	resp, err := h.registrar.Register(ctx, connect.NewRequest(&fleetv1.RegisterRequest{ClusterName: "alpha",
		BootstrapToken: h.bootstrapToken(t, time.Hour, 1, false).GetSecret()}))
	if err != nil {
		t.Fatal(err)
	}
	if exp := resp.Msg.GetCredentialExpiresAt().AsTime(); exp.Sub(h.clock.Now()) > time.Hour || exp.Sub(h.clock.Now()) < 59*time.Minute {
		t.Fatalf("credential expires at %v, want in an hour", exp)
	}
	old := h.agent(resp.Msg.GetCredential())
	stream := watch(t, old)
	stream.next(t)
	if hb, err := heartbeat(t, old); err != nil || hb.GetRotateCredential() {
		t.Fatalf("a fresh credential: rotate=%v, %v", hb.GetRotateCredential(), err)
	}
	_, err = old.RotateCredential(ctx, connect.NewRequest(&fleetv1.RotateCredentialRequest{}))
	wantCode(t, err, connect.CodeFailedPrecondition, "rotating a credential that is not due")

	h.clock.Advance(31 * time.Minute)
	hb, err := heartbeat(t, old)
	if err != nil || !hb.GetRotateCredential() {
		t.Fatalf("past half its life: rotate=%v, %v", hb.GetRotateCredential(), err)
	}
	rot, err := old.RotateCredential(ctx, connect.NewRequest(&fleetv1.RotateCredentialRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if until := rot.Msg.GetPreviousValidUntil().AsTime(); until.Sub(h.clock.Now()) > 10*time.Minute {
		t.Errorf("the old credential works until %v, want at most the 10 min grace", until)
	}
	fresh := h.agent(rot.Msg.GetCredential())
	if hb, err := heartbeat(t, fresh); err != nil || hb.GetRotateCredential() {
		t.Fatalf("the rotated credential: rotate=%v, %v", hb.GetRotateCredential(), err)
	}
	// Within the grace period the old credential works (and is asked to finish the
	// rotation), and the stream it opened still receives configuration.
	if hb, err := heartbeat(t, old); err != nil || !hb.GetRotateCredential() {
		t.Fatalf("the old credential in its grace period: rotate=%v, %v", hb.GetRotateCredential(), err)
	}
	if _, err := h.admin.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{Name: "base", Manifests: goodBundle})); err != nil {
		t.Fatal(err)
	}
	if m := stream.next(t); len(m.GetBundles()) != 1 {
		t.Fatalf("the stream opened before the rotation got %v", m)
	}

	// Past the grace period the old credential, and the stream it opened, are refused.
	h.clock.Advance(11 * time.Minute)
	_, err = heartbeat(t, old)
	ce := wantCode(t, err, connect.CodeUnauthenticated, "the old credential after its grace period")
	if !strings.Contains(ce.Message(), "rotated") {
		t.Errorf("refusal %q does not say the credential was rotated", ce.Message())
	}
	select {
	case err := <-stream.err:
		wantCode(t, err, connect.CodeUnauthenticated, "the old credential's stream after its grace period")
	case <-time.After(10 * time.Second):
		t.Fatal("the old credential's stream stayed open after its grace period")
	}
	if _, err := heartbeat(t, fresh); err != nil {
		t.Fatalf("the rotated credential: %v", err)
	}
	// Never rotated, a credential expires.
	h.clock.Advance(time.Hour)
	_, err = heartbeat(t, fresh)
	ce = wantCode(t, err, connect.CodeUnauthenticated, "an expired credential")
	if !strings.Contains(ce.Message(), "expired") {
		t.Errorf("refusal %q does not say the credential expired", ce.Message())
	}
}

// TestRotationWithThePreviousCredential: an agent that rotated but could not store the new
// credential rotates again with the old one during its grace period; the old one keeps its
// first deadline (a failing agent cannot extend it), the lost one stops working. Once the
// current credential is used, the previous one can no longer rotate.
func TestRotationWithThePreviousCredential(t *testing.T) {
	t.Parallel()
	h := startHub(t, "", func(c *server.Config) { c.AgentCredentialTTL, c.AgentCredentialGrace = time.Hour, 10*time.Minute })
	ctx := context.Background()
	old, _ := h.register(t, h.bootstrapToken(t, time.Hour, 1, false).GetSecret(), "alpha", nil)
	h.clock.Advance(31 * time.Minute)
	first, err := old.RotateCredential(ctx, connect.NewRequest(&fleetv1.RotateCredentialRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(5 * time.Minute)
	second, err := old.RotateCredential(ctx, connect.NewRequest(&fleetv1.RotateCredentialRequest{}))
	if err != nil {
		t.Fatalf("rotating again with the previous credential: %v", err)
	}
	if !second.Msg.GetPreviousValidUntil().AsTime().Equal(first.Msg.GetPreviousValidUntil().AsTime()) {
		t.Errorf("the previous credential's deadline moved from %v to %v", first.Msg.GetPreviousValidUntil().AsTime(),
			second.Msg.GetPreviousValidUntil().AsTime())
	}
	_, err = heartbeat(t, h.agent(first.Msg.GetCredential()))
	wantCode(t, err, connect.CodeUnauthenticated, "the lost credential")
	current := h.agent(second.Msg.GetCredential())
	if _, err := heartbeat(t, current); err != nil {
		t.Fatalf("the second rotation's credential: %v", err)
	}

	// Once a heartbeat presented the current credential, its agent has it: the previous one,
	// still valid for calls until its deadline, is a stale copy and may not rotate (a thief
	// would take the cluster's identity and lock the agent out).
	_, err = old.RotateCredential(ctx, connect.NewRequest(&fleetv1.RotateCredentialRequest{}))
	wantCode(t, err, connect.CodeUnauthenticated, "rotating with the previous credential once the current one is in use")
	if _, err := heartbeat(t, current); err != nil {
		t.Fatalf("the current credential after the refused rotation: %v", err)
	}
	if _, err := heartbeat(t, old); err != nil {
		t.Fatalf("the previous credential within its grace period: %v", err)
	}
}

// TestAPITokenExpiry: an API token created with a TTL works until then and is refused after,
// on FleetService and /metrics; one without works on.
func TestAPITokenExpiry(t *testing.T) {
	t.Parallel()
	h := startHub(t, "")
	ctx := context.Background()
	resp, err := h.admin.CreateAPIToken(ctx, connect.NewRequest(&fleetv1.CreateAPITokenRequest{Name: "ci", Role: fleetv1.Role_ROLE_VIEWER,
		Ttl: durationpb.New(time.Hour)}))
	if err != nil {
		t.Fatal(err)
	}
	if exp := resp.Msg.GetToken().GetExpiresAt(); exp == nil || exp.AsTime().Sub(h.clock.Now()) > time.Hour {
		t.Fatalf("expires_at %v, want in an hour", exp)
	}
	ci := h.fleet(resp.Msg.GetSecret())
	if _, err := ci.ListClusters(ctx, connect.NewRequest(&fleetv1.ListClustersRequest{})); err != nil {
		t.Fatal(err)
	}
	if code := getMetrics(t, h, resp.Msg.GetSecret()); code != 200 {
		t.Fatalf("/metrics with a live token: %d", code)
	}
	h.clock.Advance(61 * time.Minute)
	_, err = ci.ListClusters(ctx, connect.NewRequest(&fleetv1.ListClustersRequest{}))
	ce := wantCode(t, err, connect.CodeUnauthenticated, "an expired API token")
	if !strings.Contains(ce.Message(), "expired") {
		t.Errorf("refusal %q does not say the token expired", ce.Message())
	}
	if code := getMetrics(t, h, resp.Msg.GetSecret()); code != 401 {
		t.Fatalf("/metrics with an expired token: %d, want 401", code)
	}
	if _, err := h.admin.ListClusters(ctx, connect.NewRequest(&fleetv1.ListClustersRequest{})); err != nil {
		t.Fatalf("a token without expiry: %v", err)
	}
	_, err = h.admin.CreateAPIToken(ctx, connect.NewRequest(&fleetv1.CreateAPITokenRequest{Name: "bad", Role: fleetv1.Role_ROLE_VIEWER,
		Ttl: durationpb.New(-time.Hour)}))
	wantCode(t, err, connect.CodeInvalidArgument, "a negative ttl")
}
