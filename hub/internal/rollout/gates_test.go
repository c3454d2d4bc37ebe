package rollout

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"kollect.dev/hub/internal/store"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

var observed = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// status builds a status with bundle base at rev and inventory team-a/inv of items items,
// whose Ready condition is ready ("True") or "False:Reason".
func status(rev, items int64, ready string, sinkErr string) *fleetv1.AgentStatus {
	cond := &fleetv1.Condition{Type: "Ready", Status: "True", Reason: "SnapshotReady"}
	if s, reason, ok := strings.Cut(ready, ":"); ok {
		cond = &fleetv1.Condition{Type: "Ready", Status: s, Reason: reason, Message: "details",
			LastTransitionTime: timestamppb.New(observed.Add(-time.Minute))}
	}
	st := &fleetv1.AgentStatus{ObservedAt: timestamppb.New(observed),
		Inventories: []*fleetv1.InventoryStatus{{Namespace: "team-a", Name: "inv", ItemCount: items, Conditions: []*fleetv1.Condition{cond}}},
		Sinks:       []*fleetv1.SinkStatus{{Kind: "KollectDatabaseSink", Namespace: "team-a", Name: "pg", LastError: sinkErr}}}
	if rev > 0 {
		st.Bundles = []*fleetv1.AppliedBundle{{Bundle: "base", Revision: rev, Objects: []*fleetv1.ObjectResult{
			{Object: &fleetv1.ObjectRef{Kind: "KollectProfile", Namespace: "team-a", Name: "p"}, Result: fleetv1.ApplyResult_APPLY_RESULT_APPLIED}}}}
	}
	return st
}

func TestEvaluate(t *testing.T) {
	to := Target{Bundle: "base", Revision: 2}
	base := Baseline(status(1, 100, "True", ""))
	gates := &fleetv1.RolloutGates{MaxItemCountChangePercent: 20}
	failedObject := status(2, 100, "True", "")
	failedObject.Bundles[0].Objects[0].Result = fleetv1.ApplyResult_APPLY_RESULT_FAILED
	failedObject.Bundles[0].Objects[0].Message = "admission webhook denied"
	fresh := status(2, 100, "False:TargetsIncomplete", "")
	fresh.Inventories[0].Conditions[0].LastTransitionTime = timestamppb.New(observed.Add(-2 * time.Second))
	starting := status(2, 0, "False:SnapshotPending", "")
	starting.Inventories[0].Conditions[0].Message = "no snapshot built yet"
	// A message is for people: the same words under a failing reason are a failure.
	wordedLikeStarting := status(2, 0, "False:TargetsIncomplete", "")
	wordedLikeStarting.Inventories[0].Conditions[0].Message = "no snapshot built yet"
	noCond := status(2, 100, "True", "")
	noCond.Inventories[0].Conditions = nil

	for _, tc := range []struct {
		name    string
		target  Target
		base    store.Baseline
		gates   *fleetv1.RolloutGates
		st      *fleetv1.AgentStatus
		verdict Verdict
		gate    string
		msg     string
	}{
		{"no status yet", to, base, gates, nil, Wait, GateApplied, "reports no revision"},
		{"old revision", to, base, gates, status(1, 100, "True", ""), Wait, GateApplied, "agent reports 1"},
		{"all good", to, base, gates, status(2, 110, "True", ""), Pass, "", ""},
		{"failed object", to, base, gates, failedObject, Fail, GateApplied, "KollectProfile team-a/p failed: admission webhook denied"},
		{"starting: syncing", to, base, gates, status(2, 100, "False:Syncing", ""), Wait, GateInventoriesReady, "Syncing"},
		{"starting: export pending", to, base, gates, status(2, 100, "False:ExportPending", ""), Wait, GateInventoriesReady, ""},
		{"starting: first snapshot", to, base, gates, starting, Wait, GateInventoriesReady, "no snapshot built yet"},
		{"starting: targets syncing", to, base, gates, status(2, 100, "False:TargetsSyncing", ""), Wait, GateInventoriesReady, "TargetsSyncing"},
		{"message is not a reason", to, base, gates, wordedLikeStarting, Fail, GateInventoriesReady, "TargetsIncomplete"},
		{"unknown", to, base, gates, status(2, 100, "Unknown:Reconciling", ""), Wait, GateInventoriesReady, ""},
		{"no condition yet", to, base, gates, noCond, Wait, GateInventoriesReady, "no Ready condition"},
		{"profile not ready", to, base, gates, status(2, 100, "False:ProfileNotReady", ""), Fail, GateInventoriesReady, "team-a/inv is not ready: ProfileNotReady"},
		{"targets incomplete", to, base, gates, status(2, 100, "False:TargetsIncomplete", ""), Fail, GateInventoriesReady, "TargetsIncomplete"},
		{"failure not settled", to, base, gates, fresh, Wait, GateInventoriesReady, "failing for less than"},
		{"ready skipped", to, base, &fleetv1.RolloutGates{SkipInventoriesReady: true}, status(2, 100, "False:ProfileNotReady", ""), Pass, "", ""},
		{"new sink error", to, base, gates, status(2, 100, "True", "connection refused"), Fail, GateSinkErrors, "KollectDatabaseSink team-a/pg started failing: connection refused"},
		{"old sink error", to, Baseline(status(1, 100, "True", "boom")), gates, status(2, 100, "True", "boom"), Pass, "", ""},
		{"sink errors skipped", to, base, &fleetv1.RolloutGates{SkipSinkErrors: true}, status(2, 100, "True", "x"), Pass, "", ""},
		{"no baseline", to, store.Baseline{}, gates, status(2, 1, "True", "x"), Pass, "", ""},
		{"count drop", to, base, gates, status(2, 79, "True", ""), Fail, GateItemCount, "79 items, 100 before the move (-21.0%, limit ±20%)"},
		{"count growth", to, base, gates, status(2, 125, "True", ""), Fail, GateItemCount, "+25.0%"},
		{"count within", to, base, gates, status(2, 81, "True", ""), Pass, "", ""},
		{"count gate off", to, base, &fleetv1.RolloutGates{}, status(2, 1, "True", ""), Pass, "", ""},
		{"count from zero", to, Baseline(status(1, 0, "True", "")), gates, status(2, 50, "True", ""), Pass, "", ""},
		{"failure wins over wait", to, base, gates, func() *fleetv1.AgentStatus {
			s := status(2, 100, "False:Syncing", "new error")
			return s
		}(), Fail, GateSinkErrors, ""},
		{"removal pending", Target{Bundle: "base", Absent: true}, base, gates, status(1, 100, "True", ""), Wait, GateApplied, "remove bundle base"},
		{"removed", Target{Bundle: "base", Absent: true}, base, gates, status(0, 100, "True", ""), Pass, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Evaluate(tc.gates, tc.target, tc.base, tc.st)
			if got.Verdict != tc.verdict || got.Gate != tc.gate || !strings.Contains(got.Message, tc.msg) {
				t.Fatalf("got %+v, want verdict %d gate %q message containing %q", got, tc.verdict, tc.gate, tc.msg)
			}
		})
	}
}

func TestBaseline(t *testing.T) {
	b := Baseline(status(1, 42, "True", "boom"))
	if !b.Observed || b.ItemCounts["team-a/inv"] != 42 || len(b.SinkErrors) != 1 || b.SinkErrors[0] != "KollectDatabaseSink/team-a/pg" {
		t.Fatalf("baseline: %+v", b)
	}
	if Baseline(nil).Observed {
		t.Fatal("a nil status gave an observed baseline")
	}
}
