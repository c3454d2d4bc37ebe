package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// TestBootstrapTokenBoundToClusterAndLabels: a token bound to a cluster name and labels lets a
// holder register that cluster with exactly those labels, and nothing else — not a rogue name,
// not env=prod to receive production's bundles — with PermissionDenied saying what the token
// allows. A binding that no registration could satisfy is refused when the token is created.
func TestBootstrapTokenBoundToClusterAndLabels(t *testing.T) {
	t.Parallel()
	h := startHub(t, "")
	ctx := context.Background()
	tok, err := h.admin.CreateBootstrapToken(ctx, connect.NewRequest(&fleetv1.CreateBootstrapTokenRequest{
		Ttl: durationpb.New(time.Hour), MaxUses: 3, ClusterName: "edge-1", Labels: map[string]string{"env": "staging"}}))
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Msg.GetToken(); got.GetClusterName() != "edge-1" || got.GetLabels()["env"] != "staging" {
		t.Fatalf("the created token shows %v", got)
	}
	register := func(name string, labels map[string]string) error {
		_, err := h.registrar.Register(ctx, connect.NewRequest(&fleetv1.RegisterRequest{ClusterName: name, Labels: labels,
			BootstrapToken: tok.Msg.GetSecret()}))
		return err
	}
	ce := wantCode(t, register("rogue", map[string]string{"env": "staging"}), connect.CodePermissionDenied, "another cluster name")
	if !strings.Contains(ce.Message(), "only cluster edge-1") {
		t.Errorf("refusal %q does not say which cluster the token registers", ce.Message())
	}
	ce = wantCode(t, register("edge-1", map[string]string{"env": "prod"}), connect.CodePermissionDenied, "other labels")
	if !strings.Contains(ce.Message(), "exactly env=staging") {
		t.Errorf("refusal %q does not say which labels the token allows", ce.Message())
	}
	if err := register("edge-1", map[string]string{"env": "staging"}); err != nil {
		t.Fatalf("the bound cluster: %v", err)
	}
	list, err := h.admin.ListBootstrapTokens(ctx, connect.NewRequest(&fleetv1.ListBootstrapTokensRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if got := list.Msg.GetTokens()[0]; got.GetUses() != 1 || got.GetClusterName() != "edge-1" {
		t.Fatalf("after two refusals and one registration: %v", got)
	}

	_, err = h.admin.CreateBootstrapToken(ctx, connect.NewRequest(&fleetv1.CreateBootstrapTokenRequest{ClusterName: "Not_A_Name"}))
	wantCode(t, err, connect.CodeInvalidArgument, "a token bound to an invalid cluster name")
	_, err = h.admin.CreateBootstrapToken(ctx, connect.NewRequest(&fleetv1.CreateBootstrapTokenRequest{Labels: map[string]string{"bad key!": "x"}}))
	wantCode(t, err, connect.CodeInvalidArgument, "a token bound to invalid labels")
}
