package agent

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/controller/conditionstable"
	"kollect.dev/agent/internal/sink"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// The tests of this file bring a real agent into rows of the table of states in
// docs/operations.md ("Conditions") and compare the inventory's Ready, Synced and Degraded
// with the row: one for each contradiction issue 43 point 5 found. TestInventoryConditionsTable
// (package controller) checks every row against the status code.

// documentedState is the row of the table of states named state.
func documentedState(t *testing.T, state string) conditionstable.State {
	t.Helper()
	md, err := os.ReadFile(conditionstable.DocPath)
	if err != nil {
		t.Fatal(err)
	}
	states, err := conditionstable.States(md)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range states {
		if s.Name == state {
			return s
		}
	}
	t.Fatalf("docs/operations.md has no state %q", state)
	return conditionstable.State{}
}

// conditionsOf renders Ready, Synced and Degraded as the table of states does.
func conditionsOf(conds []metav1.Condition) conditionstable.State {
	var s conditionstable.State
	for typ, v := range map[string]*conditionstable.Value{kollectv1.ConditionReady: &s.Ready, kollectv1.ConditionSynced: &s.Synced, kollectv1.ConditionDegraded: &s.Degraded} {
		if c := apimeta.FindStatusCondition(conds, typ); c != nil {
			*v = conditionstable.Value{Status: string(c.Status), Reason: c.Reason}
		}
	}
	return s
}

// inState waits until the inventory's conditions are the documented state's, and while
// waiting for it holds(inv) (a positive control: the state is reached, not passed through).
func inState(t *testing.T, inv *kollectv1.KollectInventory, state string, holds func(*kollectv1.KollectInventory) (bool, string)) {
	t.Helper()
	want := documentedState(t, state)
	eventually(t, 60*time.Second, fmt.Sprintf("%s: %q", inv.Name, state), func() (bool, string) {
		if err := cp.Client.Get(context.Background(), client.ObjectKeyFromObject(inv), inv); err != nil {
			return false, err.Error()
		}
		got := conditionsOf(inv.Status.Conditions)
		got.Name = want.Name
		ok, why := holds(inv)
		return ok && got == want, fmt.Sprintf("Ready %s, Synced %s, Degraded %s, want %s, %s, %s; %s; conditions %+v",
			got.Ready, got.Synced, got.Degraded, want.Ready, want.Synced, want.Degraded, why, inv.Status.Conditions)
	})
}

// sinkHoldsCurrent is a positive control: the working sink took the current snapshot.
func sinkHoldsCurrent(name string) func(*kollectv1.KollectInventory) (bool, string) {
	return func(inv *kollectv1.KollectInventory) (bool, string) {
		for _, s := range inv.Status.Sinks {
			if s.Name == name {
				return inv.Status.Checksum != "" && s.Checksum == inv.Status.Checksum, fmt.Sprintf("sink %s holds %q of %q", name, s.Checksum, inv.Status.Checksum)
			}
		}
		return false, fmt.Sprintf("sink %s not in status.sinks %+v", name, inv.Status.Sinks)
	}
}

// TestConditionsMissingSinkIsNotSynced: an inventory one of whose two sinks does not exist is
// Degraded=True SinkInvalid and Synced=False SinkInvalid, once the other sink holds the
// current snapshot (it used to say Synced=True next to SinkInvalid). Creating the sink makes
// it Synced once that sink holds the snapshot too.
func TestConditionsMissingSinkIsNotSynced(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "cond-nosink")
	objs := configMapInventory(ns, 100*time.Millisecond, time.Second)
	inv := objs[3].(*kollectv1.KollectInventory)
	inv.Spec.Sinks.Snapshot = append(inv.Spec.Sinks.Snapshot, kollectv1.LocalObjectReference{Name: "later"})
	create(t, configMap(ns, "a", nil))
	create(t, objs...)
	startAgent(t, nil, "c1", ns, &recorders{})

	inState(t, inv, "a named sink does not exist or cannot be built", sinkHoldsCurrent("rec"))

	later := recordingSink(ns).(*kollectv1.KollectSnapshotSink)
	later.Name = "later"
	create(t, later)
	both := func(inv *kollectv1.KollectInventory) (bool, string) {
		ok, why := sinkHoldsCurrent("rec")(inv)
		ok2, why2 := sinkHoldsCurrent("later")(inv)
		return ok && ok2, why + "; " + why2
	}
	inState(t, inv, "every sink holds the current snapshot", both)
}

// TestConditionsMatchFailingEverywhereDegradesTheInventory: a target whose match fails on every
// object is Degraded=True MatchFailed, and so is its inventory, whose snapshot (without those
// objects) the sink holds (it used to say Degraded=False). Fixing the match clears both.
func TestConditionsMatchFailingEverywhereDegradesTheInventory(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "cond-match")
	objs := configMapInventory(ns, 100*time.Millisecond, time.Second)
	target := objs[1].(*kollectv1.KollectTarget)
	target.Spec.Match = "object.metadata.lables.tier == 'web'"
	inv := objs[3].(*kollectv1.KollectInventory)
	create(t, configMap(ns, "a", nil), configMap(ns, "b", nil))
	create(t, objs...)
	recs := &recorders{}
	startAgent(t, nil, "c1", ns, recs)

	conds := func() []metav1.Condition { return target.Status.Conditions }
	scopeCondition(t, target, conds, kollectv1.ConditionDegraded, metav1.ConditionTrue, kollectv1.ReasonMatchFailed, "failed on 2 objects")
	inState(t, inv, "a target's match fails on some objects", sinkHoldsCurrent("rec"))
	if c := apimeta.FindStatusCondition(inv.Status.Conditions, kollectv1.ConditionDegraded); c == nil || !containsAll(c.Message, "target "+ns+"/cm", "failed on 2 objects") {
		t.Fatalf("the inventory's Degraded does not name the target and its failure: %+v", c)
	}

	updateObject(t, target, func() { target.Spec.Match = "object.metadata.?labels.?tier.orValue('') == ''" })
	if !recs.get(ns+"/rec").WaitFor(30*time.Second, func(b []*sink.Batch) bool { return rowNames(b[len(b)-1].Envelope.Rows) == "a,b" }) {
		t.Fatal("the fixed match did not select a and b")
	}
	inState(t, inv, "every sink holds the current snapshot", sinkHoldsCurrent("rec"))
}

// TestConditionsDeletedCRDLeavesNoCountAndIncompleteInventory: once the CRD under a watched
// target is deleted, the target is Ready=False KindNotFound with no objectCount (it used to
// keep 1), and its inventory is in the documented state of a kind not served, with the
// target's coverage kindNotServed (it used to stay Ready=True with the coverage complete).
func TestConditionsDeletedCRDLeavesNoCountAndIncompleteInventory(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "cond-crdgone")
	gvk := kollectv1.GroupVersionKind{Group: "conditions.kollect.test", Version: "v1", Kind: "Gizmo"}
	crd := installCRD(t, gvk.Group, gvk.Kind, "gizmos")
	g := &unstructured.Unstructured{}
	g.SetAPIVersion(gvk.Group + "/v1")
	g.SetKind(gvk.Kind)
	g.SetNamespace(ns)
	g.SetName("blue")
	create(t, g)
	create(t, profileTarget(ns, "gizmos", gvk, kollectv1.Attribute{Name: "name", CEL: "object.metadata.name"})...)
	inv := inventoryFor(ns, "inv", []string{"gizmos"}, 200*time.Millisecond)
	create(t, recordingSink(ns), inv)
	startAgent(t, nil, "c1", ns, &recorders{})

	target := &kollectv1.KollectTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gizmos"}}
	counted := func() (bool, string) {
		if err := cp.Client.Get(context.Background(), client.ObjectKeyFromObject(target), target); err != nil {
			return false, err.Error()
		}
		return target.Status.ObjectCount == 1, fmt.Sprintf("objectCount %d", target.Status.ObjectCount)
	}
	eventually(t, 60*time.Second, "the target counting the gizmo", counted)
	inState(t, inv, "every sink holds the current snapshot", sinkHoldsCurrent("rec"))

	if err := cp.Client.Delete(context.Background(), crd); err != nil {
		t.Fatal(err)
	}
	scopeCondition(t, target, func() []metav1.Condition { return target.Status.Conditions }, kollectv1.ConditionReady, metav1.ConditionFalse, kollectv1.ReasonKindNotFound)
	if target.Status.ObjectCount != 0 || target.Status.ErrorCount != 0 {
		t.Fatalf("a target whose kind is not served counts %d objects, %d errors", target.Status.ObjectCount, target.Status.ErrorCount)
	}
	inState(t, inv, "a target's kind is not served (no CRD, or its CRD deleted)", func(inv *kollectv1.KollectInventory) (bool, string) {
		for _, c := range inv.Status.Coverage {
			if c.Target == ns+"/gizmos" {
				return c.State == kollectv1.CoverageKindNotServed, fmt.Sprintf("coverage %+v", c)
			}
		}
		return false, fmt.Sprintf("no coverage of %s/gizmos: %+v", ns, inv.Status.Coverage)
	})
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
