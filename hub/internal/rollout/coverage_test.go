package rollout

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// withCoverage gives the status's inventory one target, team-a/deploys, in state.
func withCoverage(st *fleetv1.AgentStatus, state string) *fleetv1.AgentStatus {
	st.Inventories[0].Coverage = []*fleetv1.TargetCoverage{{Target: "team-a/deploys", State: state, Rows: 7,
		Reason: "the agent may not list or watch deployments.apps"}}
	return st
}

// TestCoverageGate is issue 19 point 6: a canary whose target goes from complete to forbidden
// or not served fails with the reason, once the loss has settled; a loss that predates the
// move is not the revision's.
func TestCoverageGate(t *testing.T) {
	to := Target{Bundle: "base", Revision: 2}
	complete := Baseline(withCoverage(status(1, 7, "True", ""), "complete"))
	forbiddenBefore := Baseline(withCoverage(status(1, 7, "False:TargetsIncomplete", ""), "forbidden"))
	settledLoss := func(state string) *fleetv1.AgentStatus {
		return withCoverage(status(2, 7, "False:TargetsIncomplete", ""), state)
	}
	freshLoss := settledLoss("kindNotServed")
	freshLoss.Inventories[0].Conditions[0].LastTransitionTime = timestamppb.New(observed.Add(-2 * time.Second))

	for _, tc := range []struct {
		name    string
		gates   *fleetv1.RolloutGates
		st      *fleetv1.AgentStatus
		verdict Verdict
		gate    string
		msg     string
	}{
		{name: "still complete", st: withCoverage(status(2, 7, "True", ""), "complete"), verdict: Pass},
		{name: "complete to forbidden", st: settledLoss("forbidden"), verdict: Fail, gate: GateCoverage,
			msg: "target team-a/deploys of inventory team-a/inv is forbidden (complete before the move): the agent may not list"},
		{name: "complete to not served", st: settledLoss("kindNotServed"), verdict: Fail, gate: GateCoverage, msg: "is kindNotServed (complete before"},
		{name: "not settled yet", st: freshLoss, verdict: Wait, gate: GateCoverage, msg: "waiting for coverage to settle"},
		{name: "syncing is not a loss", st: withCoverage(status(2, 7, "False:TargetsSyncing", ""), "syncing"), verdict: Wait, gate: GateInventoriesReady},
		{name: "skipped", gates: &fleetv1.RolloutGates{SkipCoverage: true, SkipInventoriesReady: true}, st: settledLoss("forbidden"), verdict: Pass},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Evaluate(tc.gates, to, complete, tc.st)
			if r.Verdict != tc.verdict || r.Gate != tc.gate || !strings.Contains(r.Message, tc.msg) {
				t.Fatalf("got %v %q %q, want %v %q containing %q", r.Verdict, r.Gate, r.Message, tc.verdict, tc.gate, tc.msg)
			}
		})
	}

	// A target forbidden before the move stays forbidden: not the revision's fault, so the
	// coverage gate passes and inventoriesReady judges as before.
	r := Evaluate(&fleetv1.RolloutGates{SkipInventoriesReady: true}, to, forbiddenBefore, settledLoss("forbidden"))
	if r.Verdict != Pass {
		t.Fatalf("a loss from before the move failed the cluster: %+v", r)
	}
	// A new target that the revision brings and the cluster cannot see fails too.
	r = Evaluate(nil, to, Baseline(status(1, 7, "True", "")), settledLoss("kindNotServed"))
	if r.Verdict != Fail || r.Gate != GateCoverage || strings.Contains(r.Message, "before the move") {
		t.Fatalf("a new target not served: %+v", r)
	}
}
