package server_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

const (
	progressing = fleetv1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING
	paused      = fleetv1.RolloutPhase_ROLLOUT_PHASE_PAUSED
	awaiting    = fleetv1.RolloutPhase_ROLLOUT_PHASE_AWAITING_APPROVAL
	completed   = fleetv1.RolloutPhase_ROLLOUT_PHASE_COMPLETED
	superseded  = fleetv1.RolloutPhase_ROLLOUT_PHASE_SUPERSEDED
)

func fleetLabels(extra ...string) map[string]string {
	l := map[string]string{"fleet": "yes"}
	for i := 0; i+1 < len(extra); i += 2 {
		l[extra[i]] = extra[i+1]
	}
	return l
}

func canaryRing() *fleetv1.LabelSelector {
	return &fleetv1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}}
}

func count(n int32) *fleetv1.WaveSize {
	return &fleetv1.WaveSize{Size: &fleetv1.WaveSize_Count{Count: n}}
}

// rolloutEvents follows WatchFleet and collects its rollout events.
type rolloutEvents struct {
	mu     sync.Mutex
	events []*fleetv1.WatchFleetResponse
}

func (h *testHub) watchRollouts(t *testing.T) *rolloutEvents {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := h.admin.WatchFleet(ctx, connect.NewRequest(&fleetv1.WatchFleetRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	re := &rolloutEvents{}
	go func() {
		for stream.Receive() {
			if stream.Msg().GetRollout() != nil {
				re.mu.Lock()
				re.events = append(re.events, stream.Msg())
				re.mu.Unlock()
			}
		}
	}()
	return re
}

func (re *rolloutEvents) of(id int64) []*fleetv1.WatchFleetResponse {
	re.mu.Lock()
	defer re.mu.Unlock()
	var out []*fleetv1.WatchFleetResponse
	for _, e := range re.events {
		if e.GetRollout().GetId() == id {
			out = append(out, e)
		}
	}
	return out
}

// TestRolloutCanaryThenWaves: a dry run plans without storing; a viewer may plan but not
// start; the canary goes first, then waves of the set size with at most max_concurrency
// clusters in flight; a release without hold is refused meanwhile; at the end the revision is
// stable, every transition is audited and WatchFleet followed the rollout.
func TestRolloutCanaryThenWaves(t *testing.T) {
	t.Parallel()
	h := startHub(t, "")
	ctx := context.Background()
	tok := h.bootstrapToken(t, time.Hour, 0, false).GetSecret()
	var agents []*simAgent
	for i := 1; i <= 7; i++ {
		labels := fleetLabels()
		if i == 3 {
			labels = fleetLabels("ring", "canary")
		}
		agents = append(agents, h.startAgent(t, tok, fmt.Sprintf("c%d", i), labels, 200*time.Millisecond, healthy))
	}
	h.apply(t, 1, false)
	waitAgents(t, 1, agents...)
	if rev := h.apply(t, 2, true); rev != 2 {
		t.Fatalf("held revision %d", rev)
	}
	// Held: nobody moved. CreateRevision sets the desired revisions in its transaction, and
	// without an active rollout nothing else moves them: the hub's answer now is final.
	if b, err := h.admin.GetBundle(ctx, connect.NewRequest(&fleetv1.GetBundleRequest{Name: "base"})); err != nil || b.Msg.GetBundle().GetActiveRolloutId() != 0 {
		t.Fatalf("bundle after a held revision: %v %v", b, err)
	}
	h.wantDesired(t, 1, "a held revision", agents...)
	waitAgents(t, 1, agents...)

	strategy := &fleetv1.RolloutStrategy{CanarySelector: canaryRing(), WaveSize: count(2), MaxConcurrency: 1,
		MinHealthy: durationpb.New(300 * time.Millisecond)}
	viewer := h.apiToken(t, "dashboard", fleetv1.Role_ROLE_VIEWER)
	_, err := viewer.StartRollout(ctx, connect.NewRequest(&fleetv1.StartRolloutRequest{Bundle: "base", Strategy: strategy}))
	wantCode(t, err, connect.CodePermissionDenied, "viewer starting a rollout")
	plan, err := viewer.StartRollout(ctx, connect.NewRequest(&fleetv1.StartRolloutRequest{Bundle: "base", Strategy: strategy, DryRun: true}))
	if err != nil {
		t.Fatal(err)
	}
	p := plan.Msg.GetRollout()
	var names []string
	for _, w := range p.GetWaves() {
		names = append(names, fmt.Sprintf("%s:%d", w.GetName(), w.GetClustersTotal()))
	}
	if got := strings.Join(names, " "); got != "canary:1 wave 1:2 wave 2:2 wave 3:2" || p.GetId() != 0 ||
		p.GetFromRevision() != 1 || p.GetToRevision() != 2 || len(p.GetClusters()) != 7 ||
		clusterOf(t, p, "c3").GetWave() != 0 || clusterOf(t, p, "c7").GetWave() != 3 {
		t.Fatalf("plan: %s\n%v", got, p)
	}
	for _, c := range p.GetClusters() {
		if c.GetState() != fleetv1.RolloutClusterState_ROLLOUT_CLUSTER_STATE_PENDING {
			t.Fatalf("planned cluster %v", c)
		}
	}
	if l, _ := h.admin.ListRollouts(ctx, connect.NewRequest(&fleetv1.ListRolloutsRequest{})); len(l.Msg.GetRollouts()) != 0 {
		t.Fatalf("a dry run stored a rollout: %v", l.Msg)
	}

	events := h.watchRollouts(t)
	started, err := h.admin.StartRollout(ctx, connect.NewRequest(&fleetv1.StartRolloutRequest{Bundle: "base", Strategy: strategy}))
	if err != nil {
		t.Fatal(err)
	}
	r := started.Msg.GetRollout()
	if r.GetPhase() != progressing || r.GetCreatedBy() != "token:admin" || r.GetWaves()[0].GetPhase() != fleetv1.WavePhase_WAVE_PHASE_RUNNING ||
		clusterOf(t, r, "c3").GetState() != fleetv1.RolloutClusterState_ROLLOUT_CLUSTER_STATE_APPLYING {
		t.Fatalf("started rollout: %v", r)
	}

	// While it runs: no second rollout, no release without hold; the bundle shows it.
	_, err = h.admin.StartRollout(ctx, connect.NewRequest(&fleetv1.StartRolloutRequest{Bundle: "base"}))
	wantCode(t, err, connect.CodeFailedPrecondition, "second rollout")
	_, err = h.admin.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{Name: "base", Manifests: manifests(3),
		ClusterSelector: &fleetv1.LabelSelector{MatchLabels: map[string]string{"fleet": "yes"}}}))
	if ce := wantCode(t, err, connect.CodeFailedPrecondition, "release during a rollout"); !strings.Contains(ce.Message(),
		fmt.Sprintf("active rollout %d", r.GetId())) {
		t.Fatalf("refusal does not name the rollout: %q", ce.Message())
	}
	b, err := h.admin.GetBundle(ctx, connect.NewRequest(&fleetv1.GetBundleRequest{Name: "base"}))
	if err != nil || b.Msg.GetBundle().GetActiveRolloutId() != r.GetId() || b.Msg.GetBundle().GetStableRevision() != 1 {
		t.Fatalf("bundle during rollout: %v %v", b.Msg.GetBundle(), err)
	}

	done := h.waitRollout(t, r.GetId(), "completion", phaseIs(completed))
	waitAgents(t, 2, agents...)
	b, _ = h.admin.GetBundle(ctx, connect.NewRequest(&fleetv1.GetBundleRequest{Name: "base"}))
	if b.Msg.GetBundle().GetStableRevision() != 2 || b.Msg.GetBundle().GetActiveRolloutId() != 0 {
		t.Fatalf("bundle after rollout: %v", b.Msg.GetBundle())
	}

	// Order: each wave starts after the previous completed; within a wave one cluster at a time.
	byWave := map[int32][]*fleetv1.RolloutCluster{}
	for _, c := range done.GetClusters() {
		if c.GetState() != fleetv1.RolloutClusterState_ROLLOUT_CLUSTER_STATE_HEALTHY {
			t.Fatalf("cluster not healthy: %v", c)
		}
		byWave[c.GetWave()] = append(byWave[c.GetWave()], c)
	}
	for i, w := range done.GetWaves() {
		if w.GetPhase() != fleetv1.WavePhase_WAVE_PHASE_COMPLETED || w.GetClustersHealthy() != w.GetClustersTotal() {
			t.Fatalf("wave %d: %v", i, w)
		}
		cs := byWave[int32(i)]
		sort.Slice(cs, func(a, b int) bool { return cs[a].GetMovedAt().AsTime().Before(cs[b].GetMovedAt().AsTime()) })
		for j, c := range cs {
			if i > 0 && c.GetMovedAt().AsTime().Before(done.GetWaves()[i-1].GetCompletedAt().AsTime()) {
				t.Fatalf("%s of %s moved at %v, before %s completed at %v", c.GetCluster(), w.GetName(), c.GetMovedAt().AsTime(), done.GetWaves()[i-1].GetName(), done.GetWaves()[i-1].GetCompletedAt().AsTime())
			}
			if j > 0 && c.GetMovedAt().AsTime().Before(cs[j-1].GetFinishedAt().AsTime()) {
				t.Fatalf("max_concurrency 1: %s moved while %s was in flight", c.GetCluster(), cs[j-1].GetCluster())
			}
			if c.GetFinishedAt().AsTime().Sub(c.GetHealthySince().AsTime()) < 300*time.Millisecond {
				t.Fatalf("%s healthy before min_healthy: %v", c.GetCluster(), c)
			}
		}
	}

	actions := h.auditActions(t, fmt.Sprintf("rollout/%d", r.GetId()))
	want := []string{"token:admin StartRollout", "hub RolloutWaveStarted", "hub RolloutWaveCompleted", "hub RolloutCompleted"}
	for _, w := range want {
		if !slices.Contains(actions, w) {
			t.Fatalf("audit lacks %q: %v", w, actions)
		}
	}
	if n := countOf(actions, "hub RolloutWaveStarted"); n != 4 {
		t.Fatalf("%d wave starts audited, want 4: %v", n, actions)
	}

	// WatchFleet: rollout events arrive, at most one per rollout per second, the last one
	// the completion. (The first may come from the stream's initial listing, which the
	// watcher's coalescing does not cover; it is skipped in the spacing check.)
	eventually(t, func() error {
		evs := events.of(r.GetId())
		if len(evs) == 0 || evs[len(evs)-1].GetRollout().GetPhase() != completed {
			return fmt.Errorf("WatchFleet rollout events: %d, last %v", len(evs), evs)
		}
		return nil
	})
	evs := events.of(r.GetId())
	for i := 1; i < len(evs); i++ {
		if gap := evs[i].GetTime().AsTime().Sub(evs[i-1].GetTime().AsTime()); i > 1 && gap < 900*time.Millisecond {
			t.Fatalf("rollout events %v apart", gap)
		}
		if len(evs[i].GetRollout().GetClusters()) != 0 {
			t.Fatal("a WatchFleet rollout event carries clusters")
		}
	}
}

func countOf(list []string, s string) int {
	n := 0
	for _, v := range list {
		if v == s {
			n++
		}
	}
	return n
}
