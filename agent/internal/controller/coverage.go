package controller

import (
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/collector"
	"kollect.dev/agent/internal/inventory"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// note records why a target's rows may be unknown; the inventory uses it as the target's
// coverage when the collector does not collect the target.
func (o *inventoryObject) note(k collector.TargetKey, state kollectv1.CoverageState, reason string) {
	if o.notes == nil {
		o.notes = map[collector.TargetKey]inventory.TargetNote{}
	}
	o.notes[k] = inventory.TargetNote{State: state, Reason: reason}
}

// noteTarget notes a target whose Ready condition is False with the state its reason means.
// A target that is ready, or not reconciled yet, needs no note: the collector knows it. A
// target's own Degraded (a match or an extraction failing on some objects, objects cut) is
// the inventory's too: its rows lack those objects. Scope reasons come from applyScopes.
func (o *inventoryObject) noteTarget(k collector.TargetKey, conds []metav1.Condition) {
	if d := apimeta.FindStatusCondition(conds, kollectv1.ConditionDegraded); d != nil && d.Status == metav1.ConditionTrue && !isScopeReason(d.Reason) {
		o.degradedTargets = append(o.degradedTargets, targetIssue{target: k.String(), reason: d.Reason, message: d.Message})
	}
	c := apimeta.FindStatusCondition(conds, kollectv1.ConditionReady)
	if c == nil || c.Status != metav1.ConditionFalse {
		return
	}
	o.note(k, coverageOfReason(c.Reason), c.Message)
}

// coverageOfReason maps a target's Ready reason to the coverage of its rows.
func coverageOfReason(reason string) kollectv1.CoverageState {
	switch {
	case reason == kollectv1.ReasonKindNotFound:
		return kollectv1.CoverageKindNotServed
	case reason == kollectv1.ReasonForbidden:
		return kollectv1.CoverageForbidden
	case reason == kollectv1.ReasonSyncing:
		return kollectv1.CoverageSyncing
	case isScopeReason(reason):
		return kollectv1.CoverageDeniedByScope
	default:
		return kollectv1.CoverageFailed
	}
}

// targetConditions returns the conditions of a KollectTarget or KollectClusterTarget.
func targetConditions(obj client.Object) []metav1.Condition {
	switch t := obj.(type) {
	case *kollectv1.KollectTarget:
		return t.Status.Conditions
	case *kollectv1.KollectClusterTarget:
		return t.Status.Conditions
	}
	return nil
}
