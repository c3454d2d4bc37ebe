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
)

// TestBootstrapTokenDefaults: a token created without a TTL or a number of uses allows one
// registration within 24 h; a token asking for more than the hub's ceilings is refused with a
// message naming the flag that sets them.
func TestBootstrapTokenDefaults(t *testing.T) {
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
