package rollout

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"kollect.dev/hub/internal/store"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// Gate names, as RolloutCluster.gate reports them.
const (
	GateApplied          = "applied"
	GateInventoriesReady = "inventoriesReady"
	GateSinkErrors       = "sinkErrors"
	GateItemCount        = "itemCount"
	GateCoverage         = "coverage"
	GateOffline          = "offline"
	GateProgressDeadline = "progressDeadline"
)

// Verdict is a gate evaluation's outcome.
type Verdict int

// Verdicts.
const (
	// Pass: every gate holds.
	Pass Verdict = iota
	// Wait: not there yet, and nothing proves it never will be.
	Wait
	// Fail: a gate failed for good.
	Fail
)

// Result is one cluster's gate evaluation. Gate and Message name the failing or awaited gate.
type Result struct {
	Verdict Verdict
	// Applied is true once the agent reports the target applied.
	Applied bool
	Gate    string
	Message string
}

// Target is what a moved cluster should report: the bundle at Revision, or (Absent) no
// bundle at all because the target selector does not match it.
type Target struct {
	Bundle   string
	Revision int64
	Absent   bool
}

// startingReasons are the agent's condition reasons that clear by themselves
// (kollectv1.TransientReasons): an inventory still being built or exported. Only reasons are
// compared, never messages, so rewording a message cannot change a rollout's verdict.
var startingReasons = func() map[string]bool {
	m := map[string]bool{}
	for _, r := range kollectv1.TransientReasons {
		m[r] = true
	}
	return m
}()

// FailureSettle is how long (on the agent's clock: observed_at − last_transition_time) an
// inventory must have been Ready=False for a failing reason before the gate fails. Right after
// a new inventory is applied it briefly reports its target "not collected" until the target
// controller catches up; only a failure that persists is the revision's fault.
const FailureSettle = 10 * time.Second

// Baseline records, from a cluster's status before it was moved, what the comparing gates
// compare against. A nil status gives an unobserved baseline.
func Baseline(st *fleetv1.AgentStatus) store.Baseline {
	if st == nil {
		return store.Baseline{}
	}
	b := store.Baseline{Observed: true, ItemCounts: map[string]int64{}, Coverage: map[string]string{}}
	for _, inv := range st.GetInventories() {
		b.ItemCounts[inventoryKey(inv)] = inv.GetItemCount()
		for _, c := range inv.GetCoverage() {
			b.Coverage[inventoryKey(inv)+"|"+c.GetTarget()] = c.GetState()
		}
	}
	for _, s := range st.GetSinks() {
		if s.GetLastError() != "" {
			b.SinkErrors = append(b.SinkErrors, sinkKey(s))
		}
	}
	sort.Strings(b.SinkErrors)
	return b
}

func inventoryKey(inv *fleetv1.InventoryStatus) string {
	if inv.GetNamespace() == "" { // a KollectClusterInventory
		return inv.GetName()
	}
	return inv.GetNamespace() + "/" + inv.GetName()
}

func sinkKey(s *fleetv1.SinkStatus) string {
	return s.GetKind() + "/" + s.GetNamespace() + "/" + s.GetName()
}

// Evaluate judges one moved cluster's gates from a status it reported after the move.
// Failures win over waits: a cluster failing one gate fails even while another is pending.
func Evaluate(g *fleetv1.RolloutGates, t Target, base store.Baseline, st *fleetv1.AgentStatus) Result {
	if r := applied(t, st); r.Verdict != Pass {
		return r
	}
	var wait *Result
	if !g.GetSkipCoverage() {
		// Before inventoriesReady: a lost target is what makes an inventory not ready, and
		// this gate names the target and why.
		if r := coverage(base, st); r.Verdict == Fail {
			return r
		} else if r.Verdict == Wait {
			wait = &r
		}
	}
	if !g.GetSkipInventoriesReady() {
		if r := inventoriesReady(st); r.Verdict == Fail {
			return r
		} else if r.Verdict == Wait && wait == nil {
			wait = &r
		}
	}
	if base.Observed && !g.GetSkipSinkErrors() {
		if r := sinkErrors(base, st); r.Verdict == Fail {
			return r
		}
	}
	if pct := g.GetMaxItemCountChangePercent(); base.Observed && pct > 0 {
		if r := itemCount(pct, base, st); r.Verdict == Fail {
			return r
		}
	}
	if wait != nil {
		return *wait
	}
	return Result{Verdict: Pass, Applied: true}
}

func applied(t Target, st *fleetv1.AgentStatus) Result {
	var ab *fleetv1.AppliedBundle
	for _, b := range st.GetBundles() {
		if b.GetBundle() == t.Bundle {
			ab = b
		}
	}
	if t.Absent {
		if ab != nil {
			return Result{Verdict: Wait, Gate: GateApplied, Message: fmt.Sprintf(
				"waiting for the agent to remove bundle %s (the target selector does not match the cluster)", t.Bundle)}
		}
		return Result{Verdict: Pass, Applied: true}
	}
	if ab == nil {
		return Result{Verdict: Wait, Gate: GateApplied, Message: fmt.Sprintf("waiting for revision %d (the agent reports no revision)", t.Revision)}
	}
	if ab.GetRevision() != t.Revision {
		return Result{Verdict: Wait, Gate: GateApplied, Message: fmt.Sprintf("waiting for revision %d (the agent reports %d)", t.Revision, ab.GetRevision())}
	}
	for _, o := range ab.GetObjects() {
		if r := o.GetResult(); r == fleetv1.ApplyResult_APPLY_RESULT_FAILED || r == fleetv1.ApplyResult_APPLY_RESULT_REFUSED {
			what := "failed"
			if r == fleetv1.ApplyResult_APPLY_RESULT_REFUSED {
				what = "refused"
			}
			ref := o.GetObject()
			name := ref.GetName()
			if ref.GetNamespace() != "" {
				name = ref.GetNamespace() + "/" + name
			}
			return Result{Verdict: Fail, Gate: GateApplied, Message: fmt.Sprintf("%s %s %s: %s", ref.GetKind(), name, what, o.GetMessage())}
		}
	}
	return Result{Verdict: Pass, Applied: true}
}

func inventoriesReady(st *fleetv1.AgentStatus) Result {
	var waiting []string
	for _, inv := range st.GetInventories() {
		var ready *fleetv1.Condition
		for _, c := range inv.GetConditions() {
			if c.GetType() == kollectv1.ConditionReady {
				ready = c
			}
		}
		name := inventoryKey(inv)
		switch {
		case ready == nil:
			waiting = append(waiting, name+": no Ready condition yet")
		case ready.GetStatus() == "True":
		case ready.GetStatus() != "False" || starting(ready):
			waiting = append(waiting, fmt.Sprintf("%s: %s", name, condText(ready)))
		case !settled(ready, st):
			waiting = append(waiting, fmt.Sprintf("%s: %s (failing for less than %s)", name, condText(ready), FailureSettle))
		default:
			return Result{Verdict: Fail, Applied: true, Gate: GateInventoriesReady,
				Message: fmt.Sprintf("inventory %s is not ready: %s", name, condText(ready))}
		}
	}
	if len(waiting) > 0 {
		return Result{Verdict: Wait, Applied: true, Gate: GateInventoriesReady, Message: "waiting for inventory " + strings.Join(waiting, "; ")}
	}
	return Result{Verdict: Pass, Applied: true}
}

func condText(c *fleetv1.Condition) string {
	if c.GetMessage() == "" {
		return c.GetReason()
	}
	return c.GetReason() + ": " + c.GetMessage()
}

func starting(c *fleetv1.Condition) bool { return startingReasons[c.GetReason()] }

// settled reports whether a failing condition has held for FailureSettle on the agent's
// clock. Without both times (a simulated or older agent) it is taken as settled.
func settled(c *fleetv1.Condition, st *fleetv1.AgentStatus) bool {
	if c.GetLastTransitionTime() == nil || st.GetObservedAt() == nil {
		return true
	}
	return st.GetObservedAt().AsTime().Sub(c.GetLastTransitionTime().AsTime()) >= FailureSettle
}

func sinkErrors(base store.Baseline, st *fleetv1.AgentStatus) Result {
	before := map[string]bool{}
	for _, k := range base.SinkErrors {
		before[k] = true
	}
	for _, s := range st.GetSinks() {
		if s.GetLastError() != "" && !before[sinkKey(s)] {
			return Result{Verdict: Fail, Applied: true, Gate: GateSinkErrors, Message: fmt.Sprintf(
				"%s %s/%s started failing: %s", s.GetKind(), s.GetNamespace(), s.GetName(), s.GetLastError())}
		}
	}
	return Result{Verdict: Pass, Applied: true}
}

func itemCount(pct float64, base store.Baseline, st *fleetv1.AgentStatus) Result {
	for _, inv := range st.GetInventories() {
		was, ok := base.ItemCounts[inventoryKey(inv)]
		if !ok || was == 0 || notReady(inv) {
			continue
		}
		change := float64(inv.GetItemCount()-was) / float64(was) * 100
		if math.Abs(change) > pct {
			return Result{Verdict: Fail, Applied: true, Gate: GateItemCount, Message: fmt.Sprintf(
				"inventory %s has %d items, %d before the move (%+.1f%%, limit ±%g%%)", inventoryKey(inv),
				inv.GetItemCount(), was, change, pct)}
		}
	}
	return Result{Verdict: Pass, Applied: true}
}

// notReady: an inventory reporting Ready=False has no trustworthy count yet.
func notReady(inv *fleetv1.InventoryStatus) bool {
	for _, c := range inv.GetConditions() {
		if c.GetType() == kollectv1.ConditionReady {
			return c.GetStatus() == "False"
		}
	}
	return false
}
