package rollout

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"kollect.dev/hub/internal/store"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// sim is an in-memory store and fleet for Advance: it applies steps as the store would.
type sim struct {
	t        *testing.T
	r        store.Rollout
	st       *fleetv1.RolloutStrategy
	clusters map[string]store.RolloutCluster
	fleet    map[string]Observation
	statuses map[string]*fleetv1.AgentStatus
	now      time.Time
	audit    []string
}

func newSim(t *testing.T, st *fleetv1.RolloutStrategy, names ...string) *sim {
	st, err := Validate(st)
	if err != nil {
		t.Fatal(err)
	}
	s := &sim{t: t, st: st, clusters: map[string]store.RolloutCluster{}, fleet: map[string]Observation{},
		statuses: map[string]*fleetv1.AgentStatus{}, now: observed}
	var ms []Member
	for _, n := range names {
		labels := map[string]string{}
		if strings.HasPrefix(n, "canary") {
			labels["ring"] = "canary"
		}
		s.fleet[n] = Observation{Labels: labels, Live: true, LastHeartbeat: s.now.Add(-time.Second), Desired: 1}
		s.statuses[n] = status(1, 100, "True", "")
		ms = append(ms, Member{Name: n, Labels: labels})
	}
	waves, cs, err := Plan(st, ms)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		s.clusters[c.Cluster] = c
	}
	s.r = store.Rollout{ID: 7, Bundle: "base", FromRevision: 1, ToRevision: 2, Phase: store.PhaseProgressing, Waves: waves}
	return s
}

// step runs Advance once at now+d and applies the result.
func (s *sim) step(d time.Duration) bool {
	s.t.Helper()
	s.now = s.now.Add(d)
	var cs []store.RolloutCluster
	for _, c := range s.clusters {
		cs = append(cs, c)
	}
	canary, _ := CanaryMatcher(s.st)
	all := func(map[string]string) bool { return true }
	step, ok := Advance(Input{Rollout: s.r, Strategy: s.st, Clusters: cs, Fleet: s.fleet, Now: s.now,
		Status: func(n string) *fleetv1.AgentStatus { return s.statuses[n] }, Target: all, Canary: canary})
	if !ok {
		return false
	}
	s.r = step.Rollout
	for _, c := range step.Clusters {
		s.clusters[c.Cluster] = c
	}
	for _, n := range step.Remove {
		delete(s.clusters, n)
	}
	for _, n := range step.Move {
		o := s.fleet[n]
		o.Desired = 2
		s.fleet[n] = o
	}
	for _, a := range step.Audit {
		s.audit = append(s.audit, a.Action)
	}
	return true
}

// report makes cluster n send a heartbeat now with status st.
func (s *sim) report(n string, st *fleetv1.AgentStatus) {
	o := s.fleet[n]
	o.LastHeartbeat = s.now.Add(time.Millisecond)
	s.fleet[n] = o
	s.statuses[n] = st
}

func (s *sim) state(n string) string {
	c := s.clusters[n]
	return fmt.Sprintf("%s/%s", c.State, c.Gate)
}

func TestAdvanceWavesAndConcurrency(t *testing.T) {
	s := newSim(t, &fleetv1.RolloutStrategy{CanarySelector: &fleetv1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}},
		WaveSize: &fleetv1.WaveSize{Size: &fleetv1.WaveSize_Count{Count: 3}}, MaxConcurrency: 2,
		MinHealthy: durationpb.New(time.Minute)}, "canary-1", "a", "b", "c")
	if !s.step(0) || s.state("canary-1") != "applying/applied" || s.state("a") != "pending/" || s.r.Waves[0].StartedAt.IsZero() {
		t.Fatalf("first step: canary %s, a %s, waves %+v", s.state("canary-1"), s.state("a"), s.r.Waves)
	}
	if s.step(time.Second) {
		t.Fatal("a step without news changed something")
	}
	// A heartbeat from before the move never counts, even with the target applied.
	s.statuses["canary-1"] = status(2, 100, "True", "")
	if s.step(time.Second) {
		t.Fatal("an old heartbeat counted")
	}
	s.report("canary-1", status(2, 100, "True", ""))
	s.step(time.Second)
	if c := s.clusters["canary-1"]; c.State != store.ClusterVerifying || c.HealthySince.IsZero() {
		t.Fatalf("canary while min_healthy runs: %+v", c)
	}
	// A break resets healthy_since.
	s.report("canary-1", status(2, 100, "False:Syncing", ""))
	s.step(30 * time.Second)
	if c := s.clusters["canary-1"]; !c.HealthySince.IsZero() || c.Gate != GateInventoriesReady {
		t.Fatalf("canary after a break: %+v", c)
	}
	s.report("canary-1", status(2, 100, "True", ""))
	s.step(time.Second)
	s.step(59 * time.Second)
	if s.state("canary-1") != "verifying/" {
		t.Fatalf("healthy too early: %s", s.state("canary-1"))
	}
	s.step(time.Second)
	if s.state("canary-1") != "healthy/" || s.r.CurrentWave != 1 {
		t.Fatalf("after min_healthy: %s, wave %d", s.state("canary-1"), s.r.CurrentWave)
	}
	// Wave 1 (a, b, c) moves two at a time.
	if s.state("a") != "applying/applied" || s.state("b") != "applying/applied" || s.state("c") != "pending/" {
		t.Fatalf("max_concurrency 2: a %s b %s c %s", s.state("a"), s.state("b"), s.state("c"))
	}
	s.report("a", status(2, 100, "True", ""))
	s.step(time.Second)
	s.step(time.Minute)
	if s.state("a") != "healthy/" || s.state("c") != "applying/applied" {
		t.Fatalf("c did not take a's slot: a %s c %s", s.state("a"), s.state("c"))
	}
	for _, n := range []string{"b", "c"} {
		s.report(n, status(2, 100, "True", ""))
	}
	s.step(time.Second)
	s.step(time.Minute)
	if s.r.Phase != store.PhaseCompleted || s.r.FinishedAt.IsZero() {
		t.Fatalf("not completed: %+v", s.r)
	}
	want := "RolloutWaveStarted RolloutWaveCompleted RolloutWaveStarted RolloutWaveCompleted RolloutCompleted"
	if got := strings.Join(s.audit, " "); got != want {
		t.Fatalf("audit:\n got %s\nwant %s", got, want)
	}
	if w := s.r.Waves[1]; w.Healthy != 3 || w.Total != 3 || w.CompletedAt.IsZero() {
		t.Fatalf("wave counts: %+v", w)
	}
}

func TestAdvanceFailuresDeadlinesAndJoiners(t *testing.T) {
	s := newSim(t, &fleetv1.RolloutStrategy{WaveSize: &fleetv1.WaveSize{Size: &fleetv1.WaveSize_Count{Count: 2}},
		MaxFailures: 1, ProgressDeadline: durationpb.New(5 * time.Minute)}, "a", "b", "c", "d")
	s.step(0)
	s.report("a", status(2, 100, "False:ProfileNotReady", ""))
	o := s.fleet["b"]
	o.Offline = true
	s.fleet["b"] = o
	s.step(time.Second)
	if s.state("a") != "failed/inventoriesReady" || s.state("b") != "applying/offline" || s.r.Phase != store.PhaseProgressing {
		t.Fatalf("one failure is within max_failures 1: a %s b %s phase %s", s.state("a"), s.state("b"), s.r.Phase)
	}
	// b never comes back: at the deadline it fails as offline, the second failure pauses.
	s.step(5 * time.Minute)
	if s.state("b") != "failed/offline" || s.r.Phase != store.PhasePaused || !strings.Contains(s.r.Message, "a (inventoriesReady") ||
		!strings.Contains(s.r.Message, "b (offline") {
		t.Fatalf("at the deadline: b %s phase %s %q", s.state("b"), s.r.Phase, s.r.Message)
	}
	// Paused: no deadline, no move, and a joiner waits in the last wave.
	s.fleet["e"] = Observation{Live: true, Desired: 1, LastHeartbeat: s.now}
	s.step(time.Hour)
	if s.state("c") != "pending/" || s.state("e") != "pending/" || s.clusters["e"].Wave != 1 {
		t.Fatalf("while paused: c %s, joiner %+v", s.state("c"), s.clusters["e"])
	}
	// Resuming (the engine's Resume moves the running wave's deadline) goes on: wave 0 is
	// complete with its failures, wave 1 starts.
	s.r.Phase = store.PhaseProgressing
	s.step(time.Second)
	if s.r.CurrentWave != 1 || s.state("c") != "applying/applied" || s.state("e") != "applying/applied" {
		t.Fatalf("after resume: wave %d c %s e %s", s.r.CurrentWave, s.state("c"), s.state("e"))
	}
	// A cluster deleted from the fleet leaves the rollout.
	delete(s.fleet, "d")
	s.step(time.Second)
	if _, in := s.clusters["d"]; in {
		t.Fatal("a deleted cluster stayed in the rollout")
	}
	for _, n := range []string{"c", "e"} {
		s.report(n, status(2, 100, "True", ""))
	}
	s.step(time.Second)
	if s.r.Phase != store.PhaseCompleted {
		t.Fatalf("phase %s, clusters %+v", s.r.Phase, s.clusters)
	}
}

func TestAdvanceApprovalAndEmptyWaves(t *testing.T) {
	s := newSim(t, &fleetv1.RolloutStrategy{CanarySelector: &fleetv1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}},
		RequireApproval: true}, "a")
	// The canary wave matches nobody: it completes at once and the rollout waits for approval.
	s.step(0)
	if s.r.Phase != store.PhaseAwaitingApproval || s.r.CurrentWave != 1 || s.state("a") != "pending/" {
		t.Fatalf("after the empty canary: %s wave %d a %s", s.r.Phase, s.r.CurrentWave, s.state("a"))
	}
	// A canary joiner is moved even while the next wave waits for approval.
	s.fleet["canary-late"] = Observation{Labels: map[string]string{"ring": "canary"}, Live: true, Desired: 1, LastHeartbeat: s.now}
	s.step(time.Second)
	if c := s.clusters["canary-late"]; c.Wave != 0 || c.State != store.ClusterApplying || s.state("a") != "pending/" {
		t.Fatalf("canary joiner: %+v, a %s", c, s.state("a"))
	}
}
