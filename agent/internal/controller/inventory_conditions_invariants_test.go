package controller

import (
	"fmt"
	"slices"
	"testing"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// dimension is one thing an inventory's state may have: a problem of a target or a sink, a
// snapshot built, exports suspended. set puts it into a state.
type dimension struct {
	name string
	set  func(*inventoryState)
}

func oneIssue(subject string) []issue { return []issue{{subject: subject, message: subject + ": why"}} }

// dimensions are every part of inventoryState the conditions depend on, each as present or not.
// (held and carriedFrom change only the messages.)
var dimensions = []dimension{
	{"built", func(s *inventoryState) { s.built = true }},
	{"retiring", func(s *inventoryState) { s.retiring = "deleted, waiting for snapshot/rec" }},
	{"suspended", func(s *inventoryState) { s.suspended = true }},
	{"missing", func(s *inventoryState) { s.missing = oneIssue("team/gone") }},
	{"forbidden", func(s *inventoryState) { s.forbidden = oneIssue("team/sa") }},
	{"quarantined", func(s *inventoryState) { s.quarantined = oneIssue("team/heavy") }},
	{"uncollected", func(s *inventoryState) { s.uncollected = oneIssue("team/gadgets") }},
	{"syncing", func(s *inventoryState) { s.syncing = oneIssue("team/new") }},
	{"behind", func(s *inventoryState) { s.behind = oneIssue("team/busy") }},
	{"degraded target", func(s *inventoryState) {
		s.degradedTargets = []targetIssue{{target: "team/cm", reason: kollectv1.ReasonMatchFailed, message: "match failed"}}
	}},
	{"denied target", func(s *inventoryState) {
		s.denied = append(s.denied, scopeProblem{reason: kollectv1.ReasonScopeKindDenied, message: "target team/s not permitted"})
	}},
	{"denied sink", func(s *inventoryState) {
		s.denied = append(s.denied, scopeProblem{reason: kollectv1.ReasonScopeSinkDenied, message: "sink db not allowed", sink: true})
	}},
	{"invalid sink", func(s *inventoryState) { s.invalidSinks = oneIssue("snapshot sink team/nosuch: not found") }},
	{"failing sink", func(s *inventoryState) { s.failingSinks = oneIssue("snapshot/rec") }},
	{"held sink", func(s *inventoryState) { s.conflicts = append(s.conflicts, oneIssue("snapshot/shared")...) }},
	{"refused sink", func(s *inventoryState) {
		s.conflicts, s.refused = append(s.conflicts, oneIssue("snapshot/other")...), oneIssue("snapshot/other")
	}},
	{"pending sink", func(s *inventoryState) { s.pending = oneIssue("snapshot/slow") }},
}

// TestInventoryConditionsInvariants computes the conditions of every combination of the
// dimensions (2^17 states) and checks the rules of docs/operations.md ("Conditions"), so no
// combination contradicts itself; and that every condition and reason it yields is in the
// table of every reason.
func TestInventoryConditionsInvariants(t *testing.T) {
	_, reasons := documentedStates(t)
	documented := documentedReasons(reasons)
	undocumented := map[string]bool{}
	failures := 0
	for mask := 0; mask < 1<<len(dimensions); mask++ {
		s := inventoryState{items: 1, targets: 1, sinks: 1}
		var names []string
		for i, d := range dimensions {
			if mask&(1<<i) != 0 {
				d.set(&s)
				names = append(names, d.name)
			}
		}
		ready, synced, degraded := inventoryConditions(s)
		for _, problem := range contradictions(s, ready, synced, degraded) {
			if failures++; failures <= 20 {
				t.Errorf("%v: Ready=%v Synced=%v Degraded=%v: %s", names, ready, synced, degraded, problem)
			}
		}
		for i, c := range [...]conditionValue{ready, synced, degraded} {
			status := "False"
			if c.status {
				status = "True"
			}
			typ := [...]string{kollectv1.ConditionReady, kollectv1.ConditionSynced, kollectv1.ConditionDegraded}[i]
			if key := typ + "=" + status + " " + c.reason; !documented[key] && !undocumented[key] {
				undocumented[key] = true
				t.Errorf("%s (for %v) is not in the table of every reason of docs/operations.md", key, names)
			}
		}
	}
	if failures > 20 {
		t.Errorf("and %d more", failures-20)
	}
}

// contradictions lists the rules of docs/operations.md ("Conditions") that one state's
// conditions break.
func contradictions(s inventoryState, ready, synced, degraded conditionValue) []string {
	var out []string
	check := func(ok bool, rule string, args ...any) {
		if !ok {
			out = append(out, fmt.Sprintf(rule, args...))
		}
	}
	deniedSink, deniedAny := false, len(s.denied) > 0
	for _, p := range s.denied {
		deniedSink = deniedSink || p.sink
	}
	unknown := len(s.missing)+len(s.forbidden)+len(s.quarantined)+len(s.uncollected) > 0
	sinkProblem := deniedSink || len(s.invalidSinks)+len(s.failingSinks)+len(s.refused) > 0
	wantReady := s.retiring == "" && s.built && !unknown && len(s.syncing) == 0
	wantSynced := wantReady && !s.suspended && !sinkProblem && len(s.behind)+len(s.pending) == 0
	wantDegraded := deniedAny || unknown || len(s.degradedTargets)+len(s.invalidSinks)+len(s.failingSinks)+len(s.conflicts) > 0

	check(!synced.status || ready.status, "Synced=True needs Ready=True")
	check(ready.status == wantReady, "Ready should be %v: a snapshot of every target exists", wantReady)
	check(synced.status == wantSynced, "Synced should be %v: every named sink holds the current, complete snapshot", wantSynced)
	check(degraded.status == wantDegraded, "Degraded should be %v: something needs a person", wantDegraded)
	if synced.status {
		check(!slices.Contains([]string{kollectv1.ReasonSinkInvalid, kollectv1.ReasonExportFailed, kollectv1.ReasonScopeSinkDenied,
			kollectv1.ReasonTargetNotFound, kollectv1.ReasonTargetsIncomplete, kollectv1.ReasonForbidden, kollectv1.ReasonBudgetExceeded}, degraded.reason),
			"Synced=True next to Degraded=True %s", degraded.reason)
		check(degraded.reason != kollectv1.ReasonWriterConflict || len(s.refused) == 0, "Synced=True while a sink refuses this agent")
	}
	for _, c := range []conditionValue{ready, synced} {
		if !c.status && !slices.Contains(selfClearing, c.reason) {
			check(degraded.status, "%s needs a person, but Degraded is False", c.reason)
		}
		check(c.reason != "" && c.message != "", "a condition without a reason or message")
	}
	check(degraded.status == (degraded.message != ""), "Degraded's message and status disagree")
	check(degraded.status || degraded.reason == kollectv1.ReasonNoProblems, "Degraded=False with reason %s", degraded.reason)
	return out
}
