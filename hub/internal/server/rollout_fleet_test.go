package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"kollect.dev/hub/internal/server"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// TestRolloutResumesAfterHubRestart: a hub stopped mid-rollout and started again on the same
// data directory carries on from the stored state; no wave runs twice.
func TestRolloutResumesAfterHubRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := startHub(t, dir)
	addr := strings.TrimPrefix(h.url, "https://")
	tok := h.bootstrapToken(t, time.Hour, 0, false).GetSecret()
	var agents []*simAgent
	for i := range 4 {
		agents = append(agents, h.startAgent(t, tok, fmt.Sprintf("r%d", i), fleetLabels(), 200*time.Millisecond, healthy))
	}
	h.apply(t, 1, false)
	waitAgents(t, 1, agents...)
	h.apply(t, 2, true)
	r := start(t, h, &fleetv1.RolloutStrategy{WaveSize: count(1), MinHealthy: durationpb.New(700 * time.Millisecond)})
	h.waitRollout(t, r.GetId(), "wave 2", func(r *fleetv1.Rollout) bool { return r.GetCurrentWave() >= 1 })
	h.stop()
	if got := agents[3].revision(); got != 1 {
		t.Fatalf("the last wave moved before the restart (revision %d); the test proves nothing", got)
	}

	h2 := startHubAt(t, dir, addr)
	h2.admin = h2.fleet(h.srv.AdminToken)
	done := h2.waitRollout(t, r.GetId(), "completion after the restart", phaseIs(completed))
	waitAgents(t, 2, agents...)
	for _, w := range done.GetWaves() {
		if w.GetClustersHealthy() != 1 {
			t.Fatalf("wave after restart: %v", w)
		}
	}
	actions := h2.auditActions(t, fmt.Sprintf("rollout/%d", r.GetId()))
	if n := countOf(actions, "hub RolloutWaveStarted"); n != 4 {
		t.Fatalf("%d wave starts, want 4: %v", n, actions)
	}
	if n := countOf(actions, "hub RolloutCompleted"); n != 1 {
		t.Fatalf("%d completions: %v", n, actions)
	}
}

// TestRolloutOfflineCluster: an offline cluster holds its wave (gate offline) until it
// returns; one that does not return fails at the wave's deadline, which pauses the rollout.
func TestRolloutOfflineCluster(t *testing.T) {
	t.Parallel()
	h := startHub(t, "")
	tok := h.bootstrapToken(t, time.Hour, 0, false).GetSecret()
	var agents []*simAgent
	for i := 1; i <= 3; i++ {
		agents = append(agents, h.startAgent(t, tok, fmt.Sprintf("o%d", i), fleetLabels(), 100*time.Millisecond, healthy))
	}
	h.apply(t, 1, false)
	waitAgents(t, 1, agents...)

	// o1 stops reporting and turns stale (after a minute in the test hub).
	agents[0].silence(t) // a heartbeat already on its way lands first
	h.clock.Advance(2 * time.Minute)
	h.apply(t, 2, true)
	r := start(t, h, &fleetv1.RolloutStrategy{WaveSize: count(1)})
	// The window: o1 judged offline, then two more evaluations, not a sleep.
	h.waitRollout(t, r.GetId(), "o1 offline", func(r *fleetv1.Rollout) bool { return clusterOf(t, r, "o1").GetGate() == "offline" })
	h.awaitEvaluations(t)
	held := h.waitRollout(t, r.GetId(), "", func(*fleetv1.Rollout) bool { return true })
	c := clusterOf(t, held, "o1")
	if held.GetPhase() != progressing || held.GetCurrentWave() != 0 || c.GetGate() != "offline" ||
		c.GetState() != fleetv1.RolloutClusterState_ROLLOUT_CLUSTER_STATE_APPLYING ||
		clusterOf(t, held, "o2").GetState() != fleetv1.RolloutClusterState_ROLLOUT_CLUSTER_STATE_PENDING {
		t.Fatalf("while o1 is offline: %v", held)
	}
	h.wantDesired(t, 1, "while o1 is offline", agents[1], agents[2])
	agents[0].silent.Store(false) // back: it applies, reports, and the rollout goes on
	h.waitRollout(t, r.GetId(), "completion", phaseIs(completed))
	waitAgents(t, 2, agents...)

	// o2 goes offline for good: its wave waits, then fails it at the deadline.
	agents[1].silence(t)
	h.clock.Advance(2 * time.Minute)
	h.apply(t, 3, true)
	r = start(t, h, &fleetv1.RolloutStrategy{WaveSize: count(1), ProgressDeadline: durationpb.New(5 * time.Minute)})
	h.waitRollout(t, r.GetId(), "o2's wave", func(r *fleetv1.Rollout) bool { return r.GetCurrentWave() == 1 })
	h.awaitEvaluations(t) // two evaluations with o2 offline before its deadline
	if w := h.waitRollout(t, r.GetId(), "", func(*fleetv1.Rollout) bool { return true }); w.GetPhase() != progressing {
		t.Fatalf("an offline cluster failed before the deadline: %v", w)
	}
	h.clock.Advance(6 * time.Minute)
	p := h.waitRollout(t, r.GetId(), "pause at the deadline", phaseIs(paused))
	if c := clusterOf(t, p, "o2"); c.GetGate() != "offline" || !strings.Contains(c.GetMessage(), "progress deadline") {
		t.Fatalf("o2 at the deadline: %v", c)
	}
	waitAgents(t, 2, agents[2])
}

// TestRolloutJoiners: clusters registering during a rollout get the stable revision first,
// then join it: in the canary wave when the canary selector matches (moved at once, that wave
// already ran), in the last wave otherwise (moved when it runs).
func TestRolloutJoiners(t *testing.T) {
	t.Parallel()
	h := startHub(t, "")
	ctx := context.Background()
	tok := h.bootstrapToken(t, time.Hour, 0, false).GetSecret()
	c1 := h.startAgent(t, tok, "c1", fleetLabels("ring", "canary"), 200*time.Millisecond, healthy)
	c2 := h.startAgent(t, tok, "c2", fleetLabels(), 200*time.Millisecond, healthy)
	h.apply(t, 1, false)
	waitAgents(t, 1, c1, c2)
	h.apply(t, 2, true)
	r := start(t, h, &fleetv1.RolloutStrategy{CanarySelector: canaryRing(), RequireApproval: true})
	h.waitRollout(t, r.GetId(), "approval after the canary", phaseIs(awaiting))

	late := h.startAgent(t, tok, "late", fleetLabels(), 200*time.Millisecond, healthy)
	lateCanary := h.startAgent(t, tok, "late-canary", fleetLabels("ring", "canary"), 200*time.Millisecond, healthy)
	waitAgents(t, 2, lateCanary)
	got := h.waitRollout(t, r.GetId(), "joiners", func(r *fleetv1.Rollout) bool {
		return len(r.GetClusters()) == 4 && r.GetWaves()[0].GetClustersHealthy() == 2
	})
	if c := clusterOf(t, got, "late"); c.GetWave() != 1 || c.GetState() != fleetv1.RolloutClusterState_ROLLOUT_CLUSTER_STATE_PENDING {
		t.Fatalf("late joiner: %v", c)
	}
	waitAgents(t, 1, late, c2)

	if _, err := h.admin.ResumeRollout(ctx, connect.NewRequest(&fleetv1.ResumeRolloutRequest{Id: r.GetId()})); err != nil {
		t.Fatal(err)
	}
	h.waitRollout(t, r.GetId(), "completion", phaseIs(completed))
	waitAgents(t, 2, late, c2)
	// After the rollout, newcomers get the new stable revision directly.
	after := h.startAgent(t, tok, "after", fleetLabels(), 0, healthy)
	waitAgents(t, 2, after)
}

// TestRolloutAcrossReplicas: two hubs on one PostgreSQL database both run the engine; the
// compare-and-swap makes every transition happen (and be audited) exactly once.
func TestRolloutAcrossReplicas(t *testing.T) {
	t.Parallel()
	dsn, err := pg.CreateDatabase(context.Background(), "hub_rollout_replicas")
	if err != nil {
		t.Fatal(err)
	}
	shared := func(c *server.Config) { c.StoreDSN = dsn }
	a := startHub(t, "", shared)
	b := startHub(t, "", shared)
	b.admin = b.fleet(a.srv.AdminToken)
	tok := a.bootstrapToken(t, time.Hour, 0, false).GetSecret()
	var agents []*simAgent
	for i := range 4 {
		h := a
		if i%2 == 1 {
			h = b
		}
		agents = append(agents, h.startAgent(t, tok, fmt.Sprintf("x%d", i), fleetLabels(), 200*time.Millisecond, healthy))
	}
	a.apply(t, 1, false)
	waitAgents(t, 1, agents...)
	a.apply(t, 2, true)
	r := start(t, b, &fleetv1.RolloutStrategy{WaveSize: count(1)})
	a.waitRollout(t, r.GetId(), "completion", phaseIs(completed))
	waitAgents(t, 2, agents...)
	actions := a.auditActions(t, fmt.Sprintf("rollout/%d", r.GetId()))
	if countOf(actions, "hub RolloutWaveStarted") != 4 || countOf(actions, "hub RolloutWaveCompleted") != 4 ||
		countOf(actions, "hub RolloutCompleted") != 1 {
		t.Fatalf("transitions not audited exactly once: %v", actions)
	}
}
