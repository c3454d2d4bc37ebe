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

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

func start(t *testing.T, h *testHub, st *fleetv1.RolloutStrategy) *fleetv1.Rollout {
	t.Helper()
	resp, err := h.admin.StartRollout(context.Background(), connect.NewRequest(&fleetv1.StartRolloutRequest{Bundle: "base", Strategy: st}))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Msg.GetRollout()
}

// brokenAtTwo reports, on revision 2, an inventory whose profile does not compile.
func brokenAtTwo(rev int64) ([]*fleetv1.InventoryStatus, []*fleetv1.SinkStatus) {
	inv, sinks := healthy(rev)
	if rev == 2 {
		inv[0].Conditions = []*fleetv1.Condition{{Type: "Ready", Status: "False", Reason: "ProfileNotReady",
			Message: "KollectProfile team-a/deployments does not compile"}}
	}
	return inv, sinks
}

// TestRolloutFailingCanaryPausesAndRollsBack: an inventory going Ready=False on the canary
// fails it, the rollout pauses naming the cluster and the gate, the other clusters never move,
// and a rollback restores the previous revision everywhere.
func TestRolloutFailingCanaryPausesAndRollsBack(t *testing.T) {
	t.Parallel()
	h := startHub(t, "")
	ctx := context.Background()
	tok := h.bootstrapToken(t, time.Hour, 0, false).GetSecret()
	canary := h.startAgent(t, tok, "edge-canary", fleetLabels("ring", "canary"), 200*time.Millisecond, brokenAtTwo)
	rest := []*simAgent{
		h.startAgent(t, tok, "edge-1", fleetLabels(), 200*time.Millisecond, brokenAtTwo),
		h.startAgent(t, tok, "edge-2", fleetLabels(), 200*time.Millisecond, brokenAtTwo),
	}
	h.apply(t, 1, false)
	waitAgents(t, 1, append(rest, canary)...)
	h.apply(t, 2, true)

	r := start(t, h, &fleetv1.RolloutStrategy{CanarySelector: canaryRing()})
	p := h.waitRollout(t, r.GetId(), "auto-pause", phaseIs(paused))
	if !strings.Contains(p.GetMessage(), "edge-canary") || !strings.Contains(p.GetMessage(), "inventoriesReady") ||
		!strings.Contains(p.GetMessage(), "ProfileNotReady") {
		t.Fatalf("pause message: %q", p.GetMessage())
	}
	c := clusterOf(t, p, "edge-canary")
	if c.GetState() != fleetv1.RolloutClusterState_ROLLOUT_CLUSTER_STATE_FAILED || c.GetGate() != "inventoriesReady" {
		t.Fatalf("canary: %v", c)
	}
	// Paused: the wave after the canary never starts. The evidence is the hub's desired
	// revisions after two more evaluations of the paused rollout, not a sleep.
	h.awaitEvaluations(t)
	h.wantDesired(t, 1, "paused after the canary failed", rest...)
	waitAgents(t, 1, rest...)
	if w := h.waitRollout(t, r.GetId(), "", func(*fleetv1.Rollout) bool { return true }).GetWaves()[1]; w.GetPhase() != fleetv1.WavePhase_WAVE_PHASE_PENDING {
		t.Fatalf("wave 1 while paused: %v", w)
	}

	back, err := h.admin.RollbackRollout(ctx, connect.NewRequest(&fleetv1.RollbackRolloutRequest{Id: r.GetId()}))
	if err != nil {
		t.Fatal(err)
	}
	rb := back.Msg.GetRollout()
	if rb.GetRollbackOf() != r.GetId() || rb.GetFromRevision() != 2 || rb.GetToRevision() != 1 || len(rb.GetClusters()) != 1 ||
		!rb.GetStrategy().GetGates().GetSkipInventoriesReady() {
		t.Fatalf("rollback: %v", rb)
	}
	h.waitRollout(t, rb.GetId(), "rollback completion", phaseIs(completed))
	h.waitRollout(t, r.GetId(), "superseded", phaseIs(superseded))
	waitAgents(t, 1, append(rest, canary)...)
	list, err := h.admin.ListClusters(ctx, connect.NewRequest(&fleetv1.ListClustersRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range list.Msg.GetClusters() {
		if b := cl.GetBundles()[0]; b.GetDesiredRevision() != 1 {
			t.Fatalf("%s after rollback: %v", cl.GetName(), b)
		}
	}
	if b, _ := h.admin.GetBundle(ctx, connect.NewRequest(&fleetv1.GetBundleRequest{Name: "base"})); b.Msg.GetBundle().GetStableRevision() != 1 {
		t.Fatalf("stable after rollback: %v", b.Msg.GetBundle())
	}
	_, err = h.admin.RollbackRollout(ctx, connect.NewRequest(&fleetv1.RollbackRolloutRequest{Id: r.GetId()}))
	wantCode(t, err, connect.CodeFailedPrecondition, "rolling back twice")
	actions := h.auditActions(t, fmt.Sprintf("rollout/%d", r.GetId()))
	for _, w := range []string{"hub RolloutClusterFailed", "hub RolloutPaused", "token:admin RollbackRollout"} {
		if !slices.Contains(actions, w) {
			t.Fatalf("audit lacks %q: %v", w, actions)
		}
	}
}

// TestRolloutItemCountGate: a revision that halves an inventory pauses a rollout gated at 20%.
func TestRolloutItemCountGate(t *testing.T) {
	t.Parallel()
	h := startHub(t, "")
	tok := h.bootstrapToken(t, time.Hour, 0, false).GetSecret()
	halves := func(rev int64) ([]*fleetv1.InventoryStatus, []*fleetv1.SinkStatus) {
		inv, sinks := healthy(rev)
		if rev == 2 {
			inv[0].ItemCount = 50
		}
		return inv, sinks
	}
	a := h.startAgent(t, tok, "a", fleetLabels(), 200*time.Millisecond, halves)
	b := h.startAgent(t, tok, "b", fleetLabels(), 200*time.Millisecond, halves)
	h.apply(t, 1, false)
	waitAgents(t, 1, a, b)
	h.apply(t, 2, true)
	r := start(t, h, &fleetv1.RolloutStrategy{WaveSize: count(1),
		Gates: &fleetv1.RolloutGates{MaxItemCountChangePercent: 20}})
	p := h.waitRollout(t, r.GetId(), "auto-pause", phaseIs(paused))
	c := clusterOf(t, p, "a")
	if c.GetGate() != "itemCount" || !strings.Contains(c.GetMessage(), "50 items, 100 before the move") ||
		!strings.Contains(p.GetMessage(), "itemCount") {
		t.Fatalf("item count failure: %v / %q", c, p.GetMessage())
	}
	waitAgents(t, 1, b)
}

// TestRolloutRequireApproval: after each wave the rollout waits for ResumeRollout.
func TestRolloutRequireApproval(t *testing.T) {
	t.Parallel()
	h := startHub(t, "")
	ctx := context.Background()
	tok := h.bootstrapToken(t, time.Hour, 0, false).GetSecret()
	a := h.startAgent(t, tok, "a", fleetLabels(), 200*time.Millisecond, healthy)
	b := h.startAgent(t, tok, "b", fleetLabels(), 200*time.Millisecond, healthy)
	h.apply(t, 1, false)
	waitAgents(t, 1, a, b)
	h.apply(t, 2, true)
	r := start(t, h, &fleetv1.RolloutStrategy{WaveSize: count(1), RequireApproval: true})
	w := h.waitRollout(t, r.GetId(), "approval", phaseIs(awaiting))
	if w.GetCurrentWave() != 1 || !strings.Contains(w.GetMessage(), "resume to start wave 2") {
		t.Fatalf("awaiting approval: %v", w)
	}
	h.awaitEvaluations(t) // the window: two evaluations of the rollout awaiting approval
	h.wantDesired(t, 1, "awaiting approval", b)
	waitAgents(t, 2, a)
	waitAgents(t, 1, b)
	if still := h.waitRollout(t, r.GetId(), "", func(*fleetv1.Rollout) bool { return true }); still.GetPhase() != awaiting {
		t.Fatalf("did not wait: %v", still)
	}
	operator := h.apiToken(t, "ops", fleetv1.Role_ROLE_OPERATOR)
	if _, err := operator.ResumeRollout(ctx, connect.NewRequest(&fleetv1.ResumeRolloutRequest{Id: r.GetId()})); err != nil {
		t.Fatal(err)
	}
	h.waitRollout(t, r.GetId(), "completion", phaseIs(completed))
	waitAgents(t, 2, b)
	if actions := h.auditActions(t, fmt.Sprintf("rollout/%d", r.GetId())); !slices.Contains(actions, "token:ops ResumeRollout") ||
		!slices.Contains(actions, "hub RolloutAwaitingApproval") {
		t.Fatalf("audit: %v", actions)
	}
}

// TestRolloutPauseResumeAbort: a user pause stops further moves until resumed; an abort ends
// the rollout with the moved clusters on the new revision and the rest on the old.
func TestRolloutPauseResumeAbort(t *testing.T) {
	t.Parallel()
	h := startHub(t, "")
	ctx := context.Background()
	tok := h.bootstrapToken(t, time.Hour, 0, false).GetSecret()
	var agents []*simAgent
	for i := range 3 {
		agents = append(agents, h.startAgent(t, tok, fmt.Sprintf("p%d", i), fleetLabels(), 200*time.Millisecond, healthy))
	}
	h.apply(t, 1, false)
	waitAgents(t, 1, agents...)
	h.apply(t, 2, true)
	r := start(t, h, &fleetv1.RolloutStrategy{WaveSize: count(1), MinHealthy: durationpb.New(time.Second)})
	pr, err := h.admin.PauseRollout(ctx, connect.NewRequest(&fleetv1.PauseRolloutRequest{Id: r.GetId(), Reason: "lunch"}))
	if err != nil {
		t.Fatal(err)
	}
	if pr.Msg.GetRollout().GetPhase() != paused || pr.Msg.GetRollout().GetMessage() != "paused by token:admin: lunch" {
		t.Fatalf("paused: %v", pr.Msg.GetRollout())
	}
	// p0 becomes healthy meanwhile (a paused rollout still follows its moved clusters), but
	// nothing else moves: the evaluation that judged p0 healthy would have started the next
	// wave in the same step, and two more follow before the desired revisions are read.
	h.waitRollout(t, r.GetId(), "p0 healthy while paused", func(r *fleetv1.Rollout) bool {
		return clusterOf(t, r, "p0").GetState() == fleetv1.RolloutClusterState_ROLLOUT_CLUSTER_STATE_HEALTHY
	})
	h.awaitEvaluations(t)
	if p := h.waitRollout(t, r.GetId(), "", func(*fleetv1.Rollout) bool { return true }); p.GetPhase() != paused {
		t.Fatalf("after p0 turned healthy while paused: %v", p)
	}
	h.wantDesired(t, 1, "paused", agents[1], agents[2])
	waitAgents(t, 1, agents[1], agents[2])
	if _, err := h.admin.ResumeRollout(ctx, connect.NewRequest(&fleetv1.ResumeRolloutRequest{Id: r.GetId()})); err != nil {
		t.Fatal(err)
	}
	waitAgents(t, 2, agents[1])
	ab, err := h.admin.AbortRollout(ctx, connect.NewRequest(&fleetv1.AbortRolloutRequest{Id: r.GetId(), Reason: "enough"}))
	if err != nil {
		t.Fatal(err)
	}
	if ab.Msg.GetRollout().GetPhase() != fleetv1.RolloutPhase_ROLLOUT_PHASE_ABORTED || ab.Msg.GetRollout().GetFinishedAt() == nil {
		t.Fatalf("aborted: %v", ab.Msg.GetRollout())
	}
	// Aborted: the engine evaluates active rollouts only, and the abort left none, so the
	// desired revisions the hub stores now are final (an evaluation in flight loses its
	// compare-and-swap).
	if l, err := h.admin.ListRollouts(ctx, connect.NewRequest(&fleetv1.ListRolloutsRequest{Bundle: "base", ActiveOnly: true})); err != nil ||
		len(l.Msg.GetRollouts()) != 0 {
		t.Fatalf("active rollouts after the abort: %v %v", l, err)
	}
	h.wantDesired(t, 2, "aborted", agents[0], agents[1])
	h.wantDesired(t, 1, "aborted", agents[2])
	waitAgents(t, 2, agents[0], agents[1])
	waitAgents(t, 1, agents[2])
	_, err = h.admin.ResumeRollout(ctx, connect.NewRequest(&fleetv1.ResumeRolloutRequest{Id: r.GetId()}))
	wantCode(t, err, connect.CodeFailedPrecondition, "resuming an aborted rollout")
	// The bundle is free again: a release without hold is accepted.
	h.apply(t, 3, false)
	waitAgents(t, 3, agents...)
}
