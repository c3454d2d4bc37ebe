package rollout

import (
	"fmt"
	"strings"

	"kollect.dev/hub/internal/store"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// lostCoverage are the coverage states a revision must not bring: the agent cannot see the
// target's objects, or may not export them. Syncing clears by itself; retired is deliberate.
var lostCoverage = map[string]bool{
	string(kollectv1.CoverageForbidden):     true,
	string(kollectv1.CoverageKindNotServed): true,
	string(kollectv1.CoverageDeniedByScope): true,
	string(kollectv1.CoverageFailed):        true,
}

// coverage fails a cluster when a target's coverage was lost with the move: it is in a lost
// state now and was not in that state before (a target new with the revision included). A
// target already forbidden before the move is not the revision's fault. Right after an apply a
// new target is briefly "not collected", so a loss fails only once its inventory's Ready
// condition has held FailureSettle; until then the gate waits.
func coverage(base store.Baseline, st *fleetv1.AgentStatus) Result {
	var waiting []string
	for _, inv := range st.GetInventories() {
		name := inventoryKey(inv)
		for _, c := range inv.GetCoverage() {
			state := c.GetState()
			if !lostCoverage[state] || (base.Observed && base.Coverage[name+"|"+c.GetTarget()] == state) {
				continue
			}
			what := fmt.Sprintf("target %s of inventory %s is %s", c.GetTarget(), name, state)
			if was := base.Coverage[name+"|"+c.GetTarget()]; was != "" {
				what += " (" + was + " before the move)"
			}
			if c.GetReason() != "" {
				what += ": " + c.GetReason()
			}
			if ready := readyCondition(inv); ready != nil && !settled(ready, st) {
				waiting = append(waiting, what)
				continue
			}
			return Result{Verdict: Fail, Applied: true, Gate: GateCoverage, Message: what}
		}
	}
	if len(waiting) > 0 {
		return Result{Verdict: Wait, Applied: true, Gate: GateCoverage, Message: fmt.Sprintf(
			"waiting for coverage to settle (%s): %s", FailureSettle, strings.Join(waiting, "; "))}
	}
	return Result{Verdict: Pass, Applied: true}
}

func readyCondition(inv *fleetv1.InventoryStatus) *fleetv1.Condition {
	for _, c := range inv.GetConditions() {
		if c.GetType() == kollectv1.ConditionReady {
			return c
		}
	}
	return nil
}
