package storetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"kollect.dev/hub/internal/store"
)

// testApproval: a token that requires approval (or the hub's RequireApproval) registers a
// cluster pending approval, with its registration recorded. While pending it has no desired
// revision, is not live, is not observed by rollouts and counts among no bundle's clusters,
// beside an approved cluster of the same labels that has all of that (the positive control).
// Approval gives it the stable revision of the moment, released after it registered;
// approving twice, or an unknown cluster, is refused.
func testApproval(t *testing.T, s store.Store) {
	ctx := context.Background()
	bootstrap(t, s, "open", 0, time.Hour, false)
	must(t, s.CreateBootstrapToken(ctx, store.BootstrapToken{ID: "gated", Hash: "h-gated", Description: "handed to the team",
		ExpiresAt: t0.Add(time.Hour), CreatedBy: "token:admin", CreatedAt: t0, RequireApproval: true}))
	toks, err := s.ListBootstrapTokens(ctx)
	must(t, err)
	for _, tok := range toks {
		if tok.RequireApproval != (tok.ID == "gated") {
			t.Errorf("token %s: require approval %v", tok.ID, tok.RequireApproval)
		}
	}
	prod := map[string]string{"env": "prod"}
	_, _, _, err = s.CreateRevision(ctx, revision("base", "a: 1\n", `{"env":"prod"}`), "", false, matchAll)
	must(t, err)
	approved, err := register(s, "open", "approved", "c-approved", prod, false)
	must(t, err)
	if approved.Approval != store.ApprovalApproved || approved.Registration.TokenID != "open" {
		t.Fatalf("registered with a plain token: approval %q, registration %+v", approved.Approval, approved.Registration)
	}
	pending, err := s.RegisterCluster(ctx, store.RegisterParams{TokenHash: "h-gated", Name: "stranger", Labels: prod,
		CredentialHash: "c-stranger", AgentVersion: "v9", Now: t0.Add(time.Minute), Peer: "203.0.113.7"}, matchAll)
	must(t, err)
	want := store.Registration{TokenID: "gated", TokenDescription: "handed to the team", TokenCreatedBy: "token:admin",
		Peer: "203.0.113.7", AgentVersion: "v9"}
	if pending.Approval != store.ApprovalPending || pending.Registration != want || pending.DecidedBy != "" {
		t.Fatalf("registered with a gated token: approval %q, registration %+v (want %+v)", pending.Approval, pending.Registration, want)
	}
	// The hub's RequireApproval gates a plain token too.
	hubGated, err := s.RegisterCluster(ctx, store.RegisterParams{TokenHash: "h-open", Name: "hub-gated", Labels: prod,
		CredentialHash: "c-hub-gated", Now: t0.Add(time.Minute), RequireApproval: true}, matchAll)
	must(t, err)
	if hubGated.Approval != store.ApprovalPending {
		t.Fatalf("registered on a hub requiring approval: %q", hubGated.Approval)
	}

	// Pending: nothing of the fleet's configuration is theirs, while the approved cluster of
	// the same labels has all of it.
	if got := desiredOf(t, s, "approved"); got["base"] != 1 {
		t.Fatalf("approved cluster's desired revisions: %v", got)
	}
	for _, name := range []string{"stranger", "hub-gated"} {
		if got := desiredOf(t, s, name); len(got) != 0 {
			t.Errorf("%s pending approval has desired revisions %v", name, got)
		}
	}
	all, err := s.Desired(ctx, "")
	must(t, err)
	if len(all) != 1 || all[0].Cluster != "approved" {
		t.Errorf("the fleet's desired revisions: %+v, want only the approved cluster's", all)
	}
	live, err := s.LiveClusters(ctx)
	must(t, err)
	if !slices.Equal(live, []string{"approved"}) {
		t.Errorf("live clusters %v, want only the approved one", live)
	}
	observed, err := s.ObserveFleet(ctx, "base")
	must(t, err)
	if len(observed) != 1 || observed[0].Name != "approved" {
		t.Errorf("observed fleet %+v, want only the approved cluster", observed)
	}
	judged, err := s.ObserveClusters(ctx, "base", []string{"approved", "stranger"})
	must(t, err)
	if len(judged) != 1 || judged[0].Name != "approved" {
		t.Errorf("observed clusters %+v, want only the approved cluster", judged)
	}
	r2, _, selected, err := s.CreateRevision(ctx, revision("base", "a: 2\n", `{"env":"prod"}`), "", false, matchAll)
	must(t, err)
	if !slices.Equal(selected, []string{"approved"}) {
		t.Errorf("revision 2 selects %v, want only the approved cluster", selected)
	}

	epoch, err := s.ConfigEpoch(ctx)
	must(t, err)
	clusterEpoch, err := s.ClusterEpoch(ctx)
	must(t, err)
	got, err := s.ApproveCluster(ctx, store.Decision{Cluster: "stranger", By: "token:admin", At: t0.Add(time.Hour)}, matchAll)
	must(t, err)
	if got.Approval != store.ApprovalApproved || got.DecidedBy != "token:admin" || !got.DecidedAt.Equal(t0.Add(time.Hour)) ||
		got.Registration != want {
		t.Fatalf("approved: %+v", got)
	}
	if e, _ := s.ConfigEpoch(ctx); e <= epoch {
		t.Errorf("config epoch %d after an approval, was %d: replicas would not send the configuration", e, epoch)
	}
	if e, _ := s.ClusterEpoch(ctx); e <= clusterEpoch {
		t.Errorf("cluster epoch %d after an approval, was %d: rollouts would not see the cluster join", e, clusterEpoch)
	}
	if got := desiredOf(t, s, "stranger"); got["base"] != r2.Revision {
		t.Errorf("approved cluster's desired revisions %v, want base@%d, released while it was pending", got, r2.Revision)
	}
	if _, err := s.ApproveCluster(ctx, store.Decision{Cluster: "stranger", By: "token:admin", At: t0}, matchAll); !errors.Is(err, store.ErrConflict) {
		t.Errorf("approving an approved cluster: %v, want ErrConflict", err)
	}
	if _, err := s.ApproveCluster(ctx, store.Decision{Cluster: "nope", By: "token:admin", At: t0}, matchAll); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("approving an unknown cluster: %v, want ErrNotFound", err)
	}
}

// testRejection: a rejected registration is revoked and recorded; its name, once released,
// registers again with another token but never with the rejected one, not even after the
// cluster is deleted. An approved or pending cluster can be rejected; a revoked one cannot.
func testRejection(t *testing.T, s store.Store) {
	ctx := context.Background()
	bootstrap(t, s, "leaked", 0, time.Hour, false)
	bootstrap(t, s, "fresh", 0, time.Hour, false)
	_, err := register(s, "leaked", "intruder", "c1", nil, false)
	must(t, err)
	before, err := s.RejectCluster(ctx, store.Decision{Cluster: "intruder", By: "token:admin", At: t0.Add(time.Hour)})
	must(t, err)
	if before.Registration.TokenID != "leaked" || before.Revoked {
		t.Fatalf("RejectCluster returns the cluster as it was: %+v", before)
	}
	c, err := s.GetCluster(ctx, "intruder")
	must(t, err)
	if !c.Revoked || c.Approval != store.ApprovalRejected || c.DecidedBy != "token:admin" {
		t.Fatalf("rejected cluster: revoked %v approval %q by %q", c.Revoked, c.Approval, c.DecidedBy)
	}
	if _, err := s.RejectCluster(ctx, store.Decision{Cluster: "intruder", By: "token:admin", At: t0}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("rejecting a revoked cluster: %v, want ErrConflict", err)
	}
	if _, err := s.RejectCluster(ctx, store.Decision{Cluster: "nope", By: "token:admin", At: t0}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("rejecting an unknown cluster: %v, want ErrNotFound", err)
	}
	if _, err := register(s, "leaked", "intruder", "c2", nil, false); !errors.Is(err, store.ErrRegistrationRejected) {
		t.Fatalf("registering a rejected name with its token before the release: %v, want ErrRegistrationRejected", err)
	}
	if _, err := register(s, "fresh", "intruder", "c2", nil, false); !errors.Is(err, store.ErrClusterRevoked) {
		t.Fatalf("registering a rejected name with another token before the release: %v, want ErrClusterRevoked", err)
	}
	must(t, s.ReleaseCluster(ctx, "intruder"))
	if _, err := register(s, "leaked", "intruder", "c3", nil, false); !errors.Is(err, store.ErrRegistrationRejected) {
		t.Fatalf("registering a released rejected name with the rejected token: %v, want ErrRegistrationRejected", err)
	}
	again, err := register(s, "fresh", "intruder", "c4", nil, false)
	must(t, err)
	if again.Approval != store.ApprovalApproved || again.DecidedBy != "" || again.Registration.TokenID != "fresh" {
		t.Fatalf("registered with another token after the release: %+v", again)
	}
	must(t, s.DeleteCluster(ctx, "intruder"))
	if _, err := register(s, "leaked", "intruder", "c5", nil, false); !errors.Is(err, store.ErrRegistrationRejected) {
		t.Fatalf("registering a deleted rejected name with the rejected token: %v, want ErrRegistrationRejected", err)
	}
	// The refusals took no use of the token: it still registers other names.
	if _, err := register(s, "leaked", "other", "c6", nil, false); err != nil {
		t.Fatalf("the rejected token registering another name: %v", err)
	}
}
