package hubcmd

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"

	"kollect.dev/agent/internal/cli/cmdutil"
)

// The rollout renderers run on rollouts shaped like the hub's answers; the commands against a
// real hub are tested in e2e/fleet (rollout_test.go).

var rolloutNow = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func at(ago time.Duration) *timestamppb.Timestamp { return timestamppb.New(rolloutNow.Add(-ago)) }

// sampleRollout is rollout 7 of bundle inventory in its second wave: the canary healthy,
// west verifying with a failing inventoriesReady gate, north pending.
func sampleRollout() *fleetv1.Rollout {
	return &fleetv1.Rollout{
		Id: 7, Bundle: "inventory", FromRevision: 1, ToRevision: 2, Phase: fleetv1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING,
		CurrentWave: 1, CreatedBy: "token:admin", CreatedAt: at(3 * time.Minute), UpdatedAt: at(5 * time.Second),
		Strategy: &fleetv1.RolloutStrategy{
			CanarySelector: &fleetv1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}},
			WaveSize:       &fleetv1.WaveSize{Size: &fleetv1.WaveSize_Count{Count: 1}},
			MinHealthy:     durationpb.New(30 * time.Second), ProgressDeadline: durationpb.New(10 * time.Minute),
			Gates: &fleetv1.RolloutGates{MaxItemCountChangePercent: 20},
		},
		Waves: []*fleetv1.RolloutWave{
			{Index: 0, Name: "canary", Phase: fleetv1.WavePhase_WAVE_PHASE_COMPLETED, ClustersTotal: 1, ClustersHealthy: 1,
				StartedAt: at(3 * time.Minute), CompletedAt: at(2 * time.Minute)},
			{Index: 1, Name: "wave 1", Phase: fleetv1.WavePhase_WAVE_PHASE_RUNNING, ClustersTotal: 1, ClustersInProgress: 1,
				StartedAt: at(2 * time.Minute)},
			{Index: 2, Name: "wave 2", Phase: fleetv1.WavePhase_WAVE_PHASE_PENDING, ClustersTotal: 1, ClustersPending: 1},
		},
		Clusters: []*fleetv1.RolloutCluster{
			{Cluster: "west", Wave: 1, State: fleetv1.RolloutClusterState_ROLLOUT_CLUSTER_STATE_VERIFYING, Gate: "inventoriesReady",
				Message: "inventory /fleet is not ready: TargetsIncomplete:\n widgets: target widgets is not collected",
				MovedAt: at(2 * time.Minute)},
			{Cluster: "north", Wave: 2, State: fleetv1.RolloutClusterState_ROLLOUT_CLUSTER_STATE_PENDING},
			{Cluster: "east", Wave: 0, State: fleetv1.RolloutClusterState_ROLLOUT_CLUSTER_STATE_HEALTHY, MovedAt: at(3 * time.Minute),
				HealthySince: at(170 * time.Second), FinishedAt: at(2 * time.Minute)},
		},
	}
}

// pausedRollout is sampleRollout after west failed at the wave's deadline.
func pausedRollout() *fleetv1.Rollout {
	r := sampleRollout()
	r.Phase = fleetv1.RolloutPhase_ROLLOUT_PHASE_PAUSED
	r.Message = "paused: 1 cluster(s) failed, more than max_failures 0: west (inventoriesReady)"
	r.Waves[1].ClustersInProgress, r.Waves[1].ClustersFailed = 0, 1
	r.Clusters[0].State = fleetv1.RolloutClusterState_ROLLOUT_CLUSTER_STATE_FAILED
	r.Clusters[0].FinishedAt = at(0)
	return r
}

func TestRolloutStatusGolden(t *testing.T) {
	var b bytes.Buffer
	if err := writeRollout(&b, sampleRollout(), rolloutNow, false); err != nil {
		t.Fatal(err)
	}
	b.WriteString("--- paused, every cluster\n")
	if err := writeRollout(&b, pausedRollout(), rolloutNow, true); err != nil {
		t.Fatal(err)
	}
	golden(t, "rollout.status.golden", b.String())
}

func TestRolloutPlanGolden(t *testing.T) {
	plan := sampleRollout()
	plan.Id, plan.Phase = 0, fleetv1.RolloutPhase_ROLLOUT_PHASE_UNSPECIFIED
	for _, w := range plan.GetWaves() {
		w.Phase = fleetv1.WavePhase_WAVE_PHASE_PENDING
	}
	// A wide fleet: ten more clusters in waves of 25% and a canary selector that matches none.
	plan.Strategy.WaveSize = &fleetv1.WaveSize{Size: &fleetv1.WaveSize_Percent{Percent: 25}}
	plan.Strategy.CanarySelector = &fleetv1.LabelSelector{MatchExpressions: []*fleetv1.LabelSelectorRequirement{
		{Key: "ring", Operator: "In", Values: []string{"canary", "early"}}, {Key: "legacy", Operator: "DoesNotExist"}}}
	plan.Strategy.MaxConcurrency, plan.Strategy.MaxFailures, plan.Strategy.RequireApproval = 2, 1, true
	plan.Strategy.Gates = &fleetv1.RolloutGates{SkipSinkErrors: true, MaxItemCountChangePercent: 12.5}
	plan.Waves = append(plan.Waves, &fleetv1.RolloutWave{Index: 3, Name: "wave 3"})
	plan.Clusters = []*fleetv1.RolloutCluster{{Cluster: "b", Wave: 1}, {Cluster: "a", Wave: 1}, {Cluster: "c", Wave: 2}, {Cluster: "d", Wave: 3}}
	var b bytes.Buffer
	if err := writePlan(&b, plan, true); err != nil {
		t.Fatal(err)
	}
	b.WriteString("--- started, default strategy\n")
	started := sampleRollout()
	started.Strategy = &fleetv1.RolloutStrategy{}
	if err := writePlan(&b, started, false); err != nil {
		t.Fatal(err)
	}
	b.WriteString("--- a rollback of one cluster\n")
	rollback := sampleRollout()
	rollback.Id, rollback.RollbackOf, rollback.FromRevision, rollback.ToRevision = 8, 7, 2, 1
	rollback.Strategy = &fleetv1.RolloutStrategy{Gates: &fleetv1.RolloutGates{SkipInventoriesReady: true, SkipSinkErrors: true}}
	rollback.Waves = rollback.Waves[:1]
	rollback.Waves[0].Name = "wave 1"
	rollback.Clusters = rollback.Clusters[2:]
	if err := writePlan(&b, rollback, false); err != nil {
		t.Fatal(err)
	}
	golden(t, "rollout.plan.golden", b.String())
}

func TestRolloutHistoryGolden(t *testing.T) {
	done := sampleRollout()
	done.Id, done.FromRevision, done.ToRevision, done.Phase, done.RollbackOf = 8, 2, 1, fleetv1.RolloutPhase_ROLLOUT_PHASE_COMPLETED, 7
	done.Waves = []*fleetv1.RolloutWave{{Name: "wave 1", Phase: fleetv1.WavePhase_WAVE_PHASE_COMPLETED, ClustersTotal: 2, ClustersHealthy: 2}}
	superseded := pausedRollout()
	superseded.Phase = fleetv1.RolloutPhase_ROLLOUT_PHASE_SUPERSEDED
	var b bytes.Buffer
	if err := writeHistory(&b, []*fleetv1.Rollout{done, superseded}); err != nil {
		t.Fatal(err)
	}
	golden(t, "rollout.history.golden", b.String())
}

// progressStates is a rollout as a watch sees it: progressing, then west failing, then paused.
func progressStates() []*fleetv1.Rollout {
	first := sampleRollout()
	first.Clusters[0].Gate, first.Clusters[0].Message = "", ""
	first.Clusters[0].State = fleetv1.RolloutClusterState_ROLLOUT_CLUSTER_STATE_APPLYING
	return []*fleetv1.Rollout{first, sampleRollout(), sampleRollout(), pausedRollout()}
}

// TestRolloutWatchAppends: off a terminal each state appends only the lines that changed,
// stamped with the time, so a pipe or CI log reads as a history.
func TestRolloutWatchAppends(t *testing.T) {
	var b bytes.Buffer
	clock := rolloutNow
	d := &rolloutDisplay{w: &b, width: func() int { return 0 }, now: func() time.Time { clock = clock.Add(time.Second); return clock }}
	for _, r := range progressStates() {
		d.draw(r)
	}
	if strings.Contains(b.String(), "\x1b") {
		t.Fatalf("escape sequences off a terminal:\n%q", b.String())
	}
	golden(t, "rollout.watch.golden", b.String())
}

// TestRolloutWatchRedraws: on a terminal every state redraws the frame in place (cursor up
// over the previous frame, clear) with lines cut to the width.
func TestRolloutWatchRedraws(t *testing.T) {
	var b bytes.Buffer
	d := &rolloutDisplay{w: &b, width: func() int { return 100 }, now: time.Now}
	states := progressStates()
	d.draw(states[0])
	first := b.String()
	if strings.Contains(first, "\x1b[") && !strings.HasPrefix(first, "\x1b[J") {
		t.Fatalf("the first frame moves the cursor:\n%q", first)
	}
	if n := strings.Count(first, "\n"); n != 4 {
		t.Fatalf("first frame has %d lines, want title + 3 waves:\n%s", n, first)
	}
	b.Reset()
	d.draw(states[3])
	second := b.String()
	if !strings.HasPrefix(second, "\x1b[4A\r\x1b[J") {
		t.Fatalf("the second frame does not redraw over the first 4 lines:\n%q", second)
	}
	for _, l := range strings.Split(strings.TrimSuffix(strings.TrimPrefix(second, "\x1b[4A\r\x1b[J"), "\n"), "\n") {
		if n := len([]rune(l)); n > 99 {
			t.Fatalf("line of %d runes on a 100-column terminal: %q", n, l)
		}
	}
	golden(t, "rollout.watch-tty.golden", strings.ReplaceAll(first+second, "\x1b", "ESC"))
}

func TestRolloutEnded(t *testing.T) {
	for phase, want := range map[fleetv1.RolloutPhase]int{
		fleetv1.RolloutPhase_ROLLOUT_PHASE_COMPLETED:  cmdutil.ExitOK,
		fleetv1.RolloutPhase_ROLLOUT_PHASE_PAUSED:     cmdutil.ExitFindings,
		fleetv1.RolloutPhase_ROLLOUT_PHASE_ABORTED:    cmdutil.ExitFindings,
		fleetv1.RolloutPhase_ROLLOUT_PHASE_SUPERSEDED: cmdutil.ExitFindings,
	} {
		// The hub may start the message with the phase; the error says it once.
		done, err := rolloutEnded(&fleetv1.Rollout{Id: 3, Phase: phase, Message: strings.ToLower(rolloutPhase(phase)) + ": why"})
		code := cmdutil.ExitOK
		if ee, ok := err.(*cmdutil.ExitError); ok {
			code = ee.Code
			if want := "rollout 3 " + strings.ToLower(rolloutPhase(phase)) + ": why"; ee.Error() != want {
				t.Errorf("%s: %q, want %q", phase, ee.Error(), want)
			}
		}
		if !done || code != want {
			t.Errorf("%s: done %v, exit %d, want %d", phase, done, code, want)
		}
	}
	for _, phase := range []fleetv1.RolloutPhase{fleetv1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING, fleetv1.RolloutPhase_ROLLOUT_PHASE_AWAITING_APPROVAL} {
		if done, _ := rolloutEnded(&fleetv1.Rollout{Phase: phase}); done {
			t.Errorf("%s ends the watch", phase)
		}
	}
}

func TestBar(t *testing.T) {
	for _, c := range []struct {
		w    *fleetv1.RolloutWave
		want string
	}{
		{&fleetv1.RolloutWave{ClustersTotal: 3, ClustersHealthy: 1, ClustersFailed: 1, ClustersPending: 1}, "#######xxxxxx......."},
		{&fleetv1.RolloutWave{ClustersTotal: 1000, ClustersHealthy: 1, ClustersInProgress: 998, ClustersPending: 1}, ">>>>>>>>>>>>>>>>>>>>"},
		{&fleetv1.RolloutWave{ClustersTotal: 4, ClustersHealthy: 4}, "####################"},
		{&fleetv1.RolloutWave{Phase: fleetv1.WavePhase_WAVE_PHASE_COMPLETED}, "####################"},
		{&fleetv1.RolloutWave{}, "...................."},
	} {
		if got := bar(c.w); got != c.want {
			t.Errorf("bar(%v) = %q, want %q", c.w, got, c.want)
		}
	}
}

func TestParseWaveSizeAndSelector(t *testing.T) {
	for in, want := range map[string]*fleetv1.WaveSize{
		"":    nil,
		"10":  {Size: &fleetv1.WaveSize_Count{Count: 10}},
		"25%": {Size: &fleetv1.WaveSize_Percent{Percent: 25}},
	} {
		got, err := parseWaveSize(in)
		if err != nil || !proto.Equal(got, want) {
			t.Errorf("parseWaveSize(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"0", "-1", "101%", "ten", "5%%"} {
		if _, err := parseWaveSize(bad); err == nil {
			t.Errorf("parseWaveSize(%q) accepted", bad)
		}
	}
	sel, err := parseLabelSelector("ring=canary,zone in (b,a),!legacy,gpu,tier!=db")
	if err != nil {
		t.Fatal(err)
	}
	want := &fleetv1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}, MatchExpressions: []*fleetv1.LabelSelectorRequirement{
		{Key: "gpu", Operator: "Exists"}, {Key: "legacy", Operator: "DoesNotExist"}, {Key: "tier", Operator: "NotIn", Values: []string{"db"}},
		{Key: "zone", Operator: "In", Values: []string{"a", "b"}}}}
	if !proto.Equal(sel, want) {
		t.Fatalf("parseLabelSelector = %v, want %v", sel, want)
	}
	if got := formatSelector(sel); got != "ring=canary,gpu,!legacy,tier notin (db),zone in (a,b)" {
		t.Fatalf("formatSelector = %q", got)
	}
	if _, err := parseLabelSelector("size>3"); err == nil {
		t.Fatal("a numeric comparison was accepted for cluster labels")
	}
}
