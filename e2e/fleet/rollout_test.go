package fleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// TestRollouts moves one bundle through staged rollouts on a real hub with three real agents
// (ro-1 is the canary). The subtests run in order on the same fleet, each starting from every
// cluster on the bundle's stable revision and leaving it so.
func TestRollouts(t *testing.T) {
	t.Parallel() // its own control planes, hub and ports: it waits alongside the others
	f := startRolloutFleet(t)
	canary := &fleetv1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}}
	waveOf := func(n int32) *fleetv1.WaveSize { return &fleetv1.WaveSize{Size: &fleetv1.WaveSize_Count{Count: n}} }
	ro1, ro2, ro3 := f.cps[0].Name, f.cps[1].Name, f.cps[2].Name

	// a) With the CLI: a held revision goes nowhere; the rollout moves the canary, then one
	// cluster per wave; every cluster ends on it and exports the new attribute.
	t.Run("canary then waves", func(t *testing.T) {
		withSize := baseRevision
		withSize.attrs = []string{"color", "size"}
		file := filepath.Join(f.work, "bundle.yaml")
		if err := os.WriteFile(file, []byte(withSize.manifests(f.repo)), 0o644); err != nil {
			t.Fatal(err)
		}
		out, code := f.kollect("hub", "bundle", "apply", rolloutBundleName, "-f", file, "--selector", "env=e2e", "--hold", "-m", "add size")
		if code != 0 || !strings.Contains(out, "created revision 2 (held)") {
			t.Fatalf("apply --hold: exit %d:\n%s", code, out)
		}
		// A held revision reaches no one, even later: CreateRevision sets desired revisions in
		// its transaction, and with no active rollout the engine evaluates nothing, so the hub's
		// answer now is final.
		if _, active := f.stableRevision(t); active != 0 {
			t.Fatalf("a held revision started rollout %d", active)
		}
		for c, rev := range f.desired(t) {
			if rev != 1 {
				t.Fatalf("%s wants revision %d of a bundle whose revision 2 is held", c, rev)
			}
		}
		out, code = f.kollect("hub", "rollout", "start", rolloutBundleName, "--canary", "ring=canary", "--wave-size", "1", "--dry-run")
		if code != 0 || !strings.Contains(out, "3 clusters in 3 waves") || !hasLine(out, "canary", "1", ro1) {
			t.Fatalf("dry run: exit %d:\n%s", code, out)
		}
		t.Logf("rollout start --dry-run:\n%s", out)
		if _, active := f.stableRevision(t); active != 0 {
			t.Fatalf("a dry run started rollout %d", active)
		}
		out, code = f.kollect("hub", "rollout", "start", rolloutBundleName, "--canary", "ring=canary", "--wave-size", "1",
			"--min-healthy", "2s", "--progress-deadline", "2m", "--watch")
		if code != 0 {
			t.Fatalf("rollout start --watch: exit %d:\n%s", code, out)
		}
		t.Logf("rollout start --watch:\n%s", out)
		if strings.Contains(out, "\x1b") {
			t.Fatalf("escape sequences in piped output:\n%q", out)
		}
		for _, want := range []string{"canary [####################] 1/1", "wave 2 [####################] 1/1", "COMPLETED"} {
			if !strings.Contains(out, want) {
				t.Fatalf("watch output lacks %q:\n%s", want, out)
			}
		}
		var id int64
		if _, err := fmt.Sscanf(out, "rollout %d started", &id); err != nil {
			t.Fatalf("no rollout id in the output (%v):\n%s", err, out)
		}
		r := f.get(t, id)
		if r.GetPhase() != fleetv1.RolloutPhase_ROLLOUT_PHASE_COMPLETED || len(r.GetWaves()) != 3 {
			t.Fatalf("after the watch:\n%s", describeRollout(r))
		}
		// Canary first, then one cluster per wave, each wave after the previous completed.
		if c := clusterOf(r, ro1); c.GetWave() != 0 {
			t.Fatalf("the canary %s is in wave %d", ro1, c.GetWave())
		}
		for i, w := range r.GetWaves() {
			if w.GetClustersTotal() != 1 || w.GetClustersHealthy() != 1 {
				t.Fatalf("wave %d:\n%s", i, describeRollout(r))
			}
			if i > 0 && w.GetStartedAt().AsTime().Before(r.GetWaves()[i-1].GetCompletedAt().AsTime()) {
				t.Fatalf("wave %d started before wave %d completed:\n%s", i, i-1, describeRollout(r))
			}
		}
		for _, c := range r.GetClusters() {
			if w := r.GetWaves()[c.GetWave()]; c.GetMovedAt().AsTime().Before(w.GetStartedAt().AsTime()) {
				t.Fatalf("%s moved before its wave started:\n%s", c.GetCluster(), describeRollout(r))
			}
		}
		f.waitApplied(t, 30*time.Second, 2, ro1, ro2, ro3)
		if stable, active := f.stableRevision(t); stable != 2 || active != 0 {
			t.Fatalf("stable revision %d, active rollout %d after completion", stable, active)
		}
		eventually(t, 60*time.Second, "the new attribute exported by every cluster", func() (bool, string) {
			for _, cp := range f.cps {
				if doc := repoShow(t, f.repo, cp.Name+"/fleet.yaml"); !strings.Contains(doc, "size: xl") {
					return false, cp.Name + ":\n" + doc
				}
			}
			return true, ""
		})
		if out, code := f.kollect("hub", "rollout", "history", "--bundle", rolloutBundleName); code != 0 || !hasLine(out, fmt.Sprint(id), rolloutBundleName, "1 -> 2", "COMPLETED", "3/3") {
			t.Fatalf("history: exit %d:\n%s", code, out)
		}
		if out, code := f.kollect("hub", "rollout", "status", "--bundle", rolloutBundleName, "-o", "json"); code != 0 || !strings.Contains(out, `"ROLLOUT_PHASE_COMPLETED"`) {
			t.Fatalf("status -o json: exit %d:\n%s", code, out)
		}
	})

	// b) A target for a kind no cluster serves: the hub accepts it, the canary's inventory is
	// not Ready (TargetsIncomplete) and its coverage says the target's kind is not served; the
	// rollout pauses after the canary naming the coverage gate, the target and why, and a
	// rollback puts the canary's objects back.
	t.Run("failing inventory pauses and rolls back", func(t *testing.T) {
		broken := baseRevision
		broken.attrs, broken.widgets = []string{"color", "size"}, true
		rev := f.apply(t, broken, true, "a kind nobody serves")
		r := f.start(t, &fleetv1.RolloutStrategy{CanarySelector: canary, WaveSize: waveOf(1), MinHealthy: durationpb.New(2 * time.Second),
			ProgressDeadline: durationpb.New(20 * time.Second)})
		if r.GetToRevision() != rev || r.GetFromRevision() != 2 {
			t.Fatalf("rollout %d -> %d, want 2 -> %d", r.GetFromRevision(), r.GetToRevision(), rev)
		}
		eventually(t, 30*time.Second, "the canary's inventory lists the widgets target", func() (bool, string) {
			tg := inventoryTargets(t, f.cps[0])
			return tg == "colors,widgets", tg
		})
		eventually(t, 30*time.Second, "the canary's inventory not Ready", func() (bool, string) {
			c := inventoryReady(t, f.cps[0])
			return c.Status == "False" && c.Reason == "TargetsIncomplete", fmt.Sprintf("%+v", c)
		})
		paused := f.waitPhase(t, r.GetId(), 60*time.Second, fleetv1.RolloutPhase_ROLLOUT_PHASE_PAUSED)
		if c := clusterOf(paused, ro1); c.GetState() != fleetv1.RolloutClusterState_ROLLOUT_CLUSTER_STATE_FAILED || c.GetGate() != "coverage" ||
			!strings.Contains(c.GetMessage(), "widgets of inventory") || !strings.Contains(c.GetMessage(), "is kindNotServed") {
			t.Fatalf("the canary did not fail the coverage gate naming the widgets target:\n%s", describeRollout(paused))
		}
		if !strings.Contains(paused.GetMessage(), "coverage") {
			t.Fatalf("the pause message does not name the gate:\n%s", describeRollout(paused))
		}
		if d := f.desired(t); d[ro2] != 2 || d[ro3] != 2 {
			t.Fatalf("clusters after the canary were moved: %v", d)
		}
		// A paused rollout ends a watch with exit code 1 and the reason.
		out, code := f.kollect("hub", "rollout", "status", fmt.Sprint(r.GetId()), "--watch")
		if code != 1 || !strings.Contains(out, "coverage") {
			t.Fatalf("status --watch of a paused rollout: exit %d:\n%s", code, out)
		}
		t.Logf("rollout status --watch:\n%s", out)
		if out, code = f.kollect("hub", "rollout", "status", fmt.Sprint(r.GetId())); code != 0 || !hasLine(out, ro1, "FAILED", "coverage") {
			t.Fatalf("status of a paused rollout: exit %d:\n%s", code, out)
		}
		t.Logf("rollout status:\n%s", out)
		out, code = f.kollect("hub", "rollout", "rollback", fmt.Sprint(r.GetId()), "--wait")
		if code != 0 || !strings.Contains(out, "COMPLETED") {
			t.Fatalf("rollback --wait: exit %d:\n%s", code, out)
		}
		t.Logf("rollout rollback --wait:\n%s", out)
		var rb int64
		if _, err := fmt.Sscanf(out, "rollout %d started", &rb); err != nil {
			t.Fatalf("no rollout id in the rollback's output (%v):\n%s", err, out)
		}
		if out, code = f.kollect("hub", "rollout", "history"); code != 0 || !hasLine(out, fmt.Sprint(rb), "COMPLETED", "rollback of "+fmt.Sprint(r.GetId())) {
			t.Fatalf("history: exit %d:\n%s", code, out)
		}
		t.Logf("rollout history:\n%s", out)
		if old := f.get(t, r.GetId()); old.GetPhase() != fleetv1.RolloutPhase_ROLLOUT_PHASE_SUPERSEDED {
			t.Fatalf("the rolled-back rollout:\n%s", describeRollout(old))
		}
		f.waitApplied(t, 30*time.Second, 2, ro1, ro2, ro3)
		eventually(t, 30*time.Second, "the canary's objects back on the old spec", func() (bool, string) {
			tg, w, c := inventoryTargets(t, f.cps[0]), hasWidgetsTarget(t, f.cps[0]), inventoryReady(t, f.cps[0])
			return tg == "colors" && !w && c.Status == "True", fmt.Sprintf("targets %s, widgets target %v, Ready %+v", tg, w, c)
		})
		if stable, active := f.stableRevision(t); stable != 2 || active != 0 {
			t.Fatalf("stable revision %d, active rollout %d after the rollback", stable, active)
		}
	})

	// c) A target that selects one ConfigMap of four drops the item count by 75%: beyond a
	// 50% gate, the rollout pauses; abort, then roll back.
	t.Run("item count drop pauses", func(t *testing.T) {
		narrow := baseRevision
		narrow.attrs = []string{"color", "size"}
		narrow.selector = `{inventory: fleet, keep: "yes"}`
		f.apply(t, narrow, true, "only the kept ConfigMaps")
		r := f.start(t, &fleetv1.RolloutStrategy{CanarySelector: canary, WaveSize: waveOf(1), MinHealthy: durationpb.New(5 * time.Second),
			ProgressDeadline: durationpb.New(30 * time.Second), Gates: &fleetv1.RolloutGates{MaxItemCountChangePercent: 50}})
		paused := f.waitPhase(t, r.GetId(), 60*time.Second, fleetv1.RolloutPhase_ROLLOUT_PHASE_PAUSED)
		if c := clusterOf(paused, ro1); c.GetState() != fleetv1.RolloutClusterState_ROLLOUT_CLUSTER_STATE_FAILED || c.GetGate() != "itemCount" {
			t.Fatalf("the canary did not fail the itemCount gate:\n%s", describeRollout(paused))
		}
		if !strings.Contains(paused.GetMessage(), "itemCount") {
			t.Fatalf("the pause message does not name the gate:\n%s", describeRollout(paused))
		}
		if d := f.desired(t); d[ro2] != 2 || d[ro3] != 2 {
			t.Fatalf("clusters after the canary were moved: %v", d)
		}
		out, code := f.kollect("hub", "rollout", "abort", fmt.Sprint(r.GetId()), "--reason", "item count")
		if code != 0 || !strings.Contains(out, "ABORTED") {
			t.Fatalf("abort: exit %d:\n%s", code, out)
		}
		rb, err := f.admin.RollbackRollout(context.Background(), connect.NewRequest(&fleetv1.RollbackRolloutRequest{Id: r.GetId()}))
		if err != nil {
			t.Fatal(err)
		}
		f.waitPhase(t, rb.Msg.GetRollout().GetId(), 60*time.Second, fleetv1.RolloutPhase_ROLLOUT_PHASE_COMPLETED)
		f.waitApplied(t, 30*time.Second, 2, ro1, ro2, ro3)
	})

	// d) With require_approval the rollout stops after every wave until resumed.
	t.Run("manual approval waits", func(t *testing.T) {
		slower := baseRevision
		slower.attrs, slower.debounce = []string{"color", "size"}, "2s"
		rev := f.apply(t, slower, true, "debounce 2s")
		r := f.start(t, &fleetv1.RolloutStrategy{CanarySelector: canary, WaveSize: waveOf(1), RequireApproval: true,
			ProgressDeadline: durationpb.New(time.Minute)})
		approvals := 0
		for {
			cur := f.waitRollout(t, r.GetId(), 60*time.Second, "awaiting approval or completed", func(r *fleetv1.Rollout) bool {
				return r.GetPhase() == fleetv1.RolloutPhase_ROLLOUT_PHASE_AWAITING_APPROVAL || r.GetPhase() == fleetv1.RolloutPhase_ROLLOUT_PHASE_COMPLETED
			})
			if cur.GetPhase() == fleetv1.RolloutPhase_ROLLOUT_PHASE_COMPLETED {
				break
			}
			// Nothing beyond the completed waves moves while approval is pending: the window is
			// two evaluations of the rollout awaiting approval, not a sleep.
			f.awaitEvaluations(t)
			held := f.get(t, r.GetId())
			if held.GetPhase() != fleetv1.RolloutPhase_ROLLOUT_PHASE_AWAITING_APPROVAL {
				t.Fatalf("approval not awaited:\n%s", describeRollout(held))
			}
			d := f.desired(t)
			for _, c := range held.GetClusters() {
				if w := held.GetWaves()[c.GetWave()]; w.GetPhase() == fleetv1.WavePhase_WAVE_PHASE_PENDING && d[c.GetCluster()] == rev {
					t.Fatalf("%s of a pending wave was moved while awaiting approval:\n%s", c.GetCluster(), describeRollout(held))
				}
			}
			approvals++
			if approvals == 1 {
				if out, code := f.kollect("hub", "rollout", "resume", fmt.Sprint(r.GetId())); code != 0 || !strings.Contains(out, "PROGRESSING") {
					t.Fatalf("resume: exit %d:\n%s", code, out)
				}
			} else if _, err := f.admin.ResumeRollout(context.Background(), connect.NewRequest(&fleetv1.ResumeRolloutRequest{Id: r.GetId()})); err != nil {
				t.Fatal(err)
			}
			if approvals > 3 {
				t.Fatalf("%d approvals for 3 waves", approvals)
			}
		}
		t.Logf("%d approvals", approvals)
		if approvals < 2 {
			t.Fatalf("%d approvals for 3 waves, want one after each wave but the last at least", approvals)
		}
		f.waitApplied(t, 30*time.Second, rev, ro1, ro2, ro3)
	})

	// e) The hub restarts (same data directory) while a wave runs; the rollout carries on
	// where it was and completes.
	t.Run("hub restart resumes", func(t *testing.T) {
		slower := baseRevision
		slower.attrs, slower.debounce = []string{"color", "size"}, "3s"
		rev := f.apply(t, slower, true, "debounce 3s")
		r := f.start(t, &fleetv1.RolloutStrategy{WaveSize: waveOf(1), MinHealthy: durationpb.New(5 * time.Second),
			ProgressDeadline: durationpb.New(2 * time.Minute)})
		before := f.waitRollout(t, r.GetId(), 60*time.Second, "the first wave completed", func(r *fleetv1.Rollout) bool {
			return r.GetCurrentWave() >= 1 && r.GetWaves()[0].GetPhase() == fleetv1.WavePhase_WAVE_PHASE_COMPLETED
		})
		if before.GetPhase() == fleetv1.RolloutPhase_ROLLOUT_PHASE_COMPLETED {
			t.Fatalf("completed before the restart:\n%s", describeRollout(before))
		}
		f.h.stop()
		time.Sleep(2 * time.Second)
		f.h.start()
		after := f.waitPhase(t, r.GetId(), 90*time.Second, fleetv1.RolloutPhase_ROLLOUT_PHASE_COMPLETED)
		if !after.GetWaves()[0].GetCompletedAt().AsTime().Equal(before.GetWaves()[0].GetCompletedAt().AsTime()) {
			t.Fatalf("the first wave ran again after the restart:\nbefore %s\nafter %s", describeRollout(before), describeRollout(after))
		}
		f.waitApplied(t, 30*time.Second, rev, ro1, ro2, ro3)
		if l, err := f.admin.ListRollouts(context.Background(), connect.NewRequest(&fleetv1.ListRolloutsRequest{Bundle: rolloutBundleName, ActiveOnly: true})); err != nil || len(l.Msg.GetRollouts()) != 0 {
			t.Fatalf("active rollouts after completion: %v %v", l, err)
		}
	})

	// f) An agent that is away holds its wave (not healthy, not failed) until it returns; with
	// a short deadline it fails with the offline gate instead.
	t.Run("offline cluster", func(t *testing.T) {
		f.agents[2].stop()
		slower := baseRevision
		slower.attrs, slower.debounce = []string{"color", "size"}, "4s"
		rev := f.apply(t, slower, true, "debounce 4s")
		r := f.start(t, &fleetv1.RolloutStrategy{CanarySelector: canary, WaveSize: waveOf(2), ProgressDeadline: durationpb.New(3 * time.Minute)})
		f.waitRollout(t, r.GetId(), 60*time.Second, ro2+" healthy", func(r *fleetv1.Rollout) bool {
			return clusterOf(r, ro2).GetState() == fleetv1.RolloutClusterState_ROLLOUT_CLUSTER_STATE_HEALTHY
		})
		// Past the hub's offline threshold (20s), the wave still holds.
		eventually(t, 40*time.Second, ro3+" offline", func() (bool, string) {
			c, err := f.admin.GetCluster(context.Background(), connect.NewRequest(&fleetv1.GetClusterRequest{Name: ro3}))
			if err != nil {
				return false, err.Error()
			}
			return c.Msg.GetCluster().GetState() == fleetv1.ClusterState_CLUSTER_STATE_OFFLINE, c.Msg.GetCluster().GetState().String()
		})
		f.awaitEvaluations(t) // the window: two evaluations with ro3 offline
		held := f.get(t, r.GetId())
		c := clusterOf(held, ro3)
		if held.GetPhase() != fleetv1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING || c.GetState() == fleetv1.RolloutClusterState_ROLLOUT_CLUSTER_STATE_FAILED ||
			c.GetState() == fleetv1.RolloutClusterState_ROLLOUT_CLUSTER_STATE_HEALTHY {
			t.Fatalf("an offline cluster did not hold its wave:\n%s", describeRollout(held))
		}
		if c.GetGate() != "offline" {
			t.Errorf("the offline cluster's failing gate is %q, want offline:\n%s", c.GetGate(), describeRollout(held))
		}
		f.agents[2].start()
		f.waitPhase(t, r.GetId(), 90*time.Second, fleetv1.RolloutPhase_ROLLOUT_PHASE_COMPLETED)
		f.waitApplied(t, 30*time.Second, rev, ro1, ro2, ro3)

		// Away past a short deadline: the cluster fails with the offline gate and the rollout
		// pauses.
		f.agents[2].stop()
		eventually(t, 40*time.Second, ro3+" offline again", func() (bool, string) {
			c, err := f.admin.GetCluster(context.Background(), connect.NewRequest(&fleetv1.GetClusterRequest{Name: ro3}))
			if err != nil {
				return false, err.Error()
			}
			return c.Msg.GetCluster().GetState() == fleetv1.ClusterState_CLUSTER_STATE_OFFLINE, c.Msg.GetCluster().GetState().String()
		})
		slower.debounce = "5s"
		f.apply(t, slower, true, "debounce 5s")
		r = f.start(t, &fleetv1.RolloutStrategy{ProgressDeadline: durationpb.New(15 * time.Second)})
		paused := f.waitPhase(t, r.GetId(), 60*time.Second, fleetv1.RolloutPhase_ROLLOUT_PHASE_PAUSED)
		if c := clusterOf(paused, ro3); c.GetState() != fleetv1.RolloutClusterState_ROLLOUT_CLUSTER_STATE_FAILED || c.GetGate() != "offline" {
			t.Fatalf("the offline cluster at the deadline:\n%s", describeRollout(paused))
		}
		for _, name := range []string{ro1, ro2} {
			if c := clusterOf(paused, name); c.GetState() != fleetv1.RolloutClusterState_ROLLOUT_CLUSTER_STATE_HEALTHY {
				t.Fatalf("%s of the same wave:\n%s", name, describeRollout(paused))
			}
		}
		f.agents[2].start()
	})
}

// hasLine is true when one line of out starts with first and holds every one of rest.
func hasLine(out, first string, rest ...string) bool {
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, first+" ") {
			continue
		}
		ok := true
		for _, r := range rest {
			ok = ok && strings.Contains(l, r)
		}
		if ok {
			return true
		}
	}
	return false
}
