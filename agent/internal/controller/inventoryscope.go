package controller

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"kollect.dev/agent/internal/collector"
	"kollect.dev/agent/internal/inventory"
	"kollect.dev/agent/internal/scope"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// scopeProblem is one scope rule an inventory runs into, with the condition reason. sink marks
// a sink not bound: it holds no current snapshot, so the inventory is not Synced.
type scopeProblem struct {
	reason, message string
	sink            bool
}

// applyScopes enforces scopes on an inventory that is already admitted:
//
//   - targets that are not permitted (the target reconciler decided) are left out, so their
//     rows stop being exported: snapshot sinks receive documents without them and diff-based
//     sinks see them go. The status says "not permitted" and names the rule, so nobody reads
//     it as the objects having been deleted from the cluster;
//   - sinks the scopes do not allow are not bound: nothing more is exported to them, and what
//     they already hold is left alone;
//   - a debounce or resync interval below the scopes' minimum is raised to the minimum, and so
//     is a maxDelay below the minimum debounce (under churn it sets the pace).
//
// Every case sets Degraded=True with the Scope* reason of the first problem.
func (r *InventoryReconciler) applyScopes(ctx context.Context, key inventory.Key, o *inventoryObject) error {
	if r.Scopes == nil {
		return nil
	}
	rules, err := r.Scopes.Rules(ctx, key.Namespace)
	if err != nil {
		return err
	}
	permitted := o.targets[:0:0]
	for _, tk := range o.targets {
		if d, denied := r.Scopes.targetDenied(tk); denied {
			o.denied = append(o.denied, scopeProblem{reason: d.Reason, message: fmt.Sprintf(
				"target %s not permitted (%s: %s): its rows are not exported", tk, d.Reason, trimNotPermitted(d.Message))})
			if o.deniedTargets == nil {
				o.deniedTargets = map[collector.TargetKey]inventory.TargetNote{}
			}
			o.deniedTargets[tk] = inventory.TargetNote{State: kollectv1.CoverageDeniedByScope, Reason: d.Reason + ": " + trimNotPermitted(d.Message)}
			continue
		}
		permitted = append(permitted, tk)
	}
	o.targets = permitted

	allowed := o.sinks[:0:0]
	for _, ref := range o.sinks {
		sr := scope.SinkRef{Family: ref.Family, Name: ref.Name}
		if key.Namespace == "" {
			sr.Namespace = ref.Namespace
		}
		if d := rules.Sink(sr); !d.Allowed {
			o.denied = append(o.denied, scopeProblem{reason: d.Reason, message: d.Message + ": nothing is exported to it", sink: true})
			continue
		}
		allowed = append(allowed, ref)
	}
	o.sinks = allowed

	if d := rules.Cadence(o.timing); !d.Allowed {
		minDebounce, minResync := rules.Minimums()
		if o.timing.Debounce.Duration < minDebounce {
			o.timing.Debounce.Duration = minDebounce
		}
		// Under constant churn maxDelay, not the debounce, sets the pace: a floor that left
		// it below would have no effect.
		if o.timing.MaxDelay.Duration < minDebounce {
			o.timing.MaxDelay.Duration = minDebounce
		}
		if o.timing.ResyncInterval != nil && o.timing.ResyncInterval.Duration < minResync {
			v := *o.timing.ResyncInterval
			v.Duration = minResync
			o.timing.ResyncInterval = &v
		}
		msg := d.Message
		if d.Reason == kollectv1.ReasonScopeCadenceTooFast {
			msg += ": the minimum applies"
		}
		o.denied = append(o.denied, scopeProblem{reason: d.Reason, message: msg})
	}
	// Keep one entry per message: ScopeMissing repeats the same message for every check.
	seen := map[string]bool{}
	uniq := o.denied[:0]
	for _, p := range o.denied {
		if !seen[p.message] {
			seen[p.message] = true
			uniq = append(uniq, p)
		}
	}
	o.denied = uniq
	return nil
}

func trimNotPermitted(msg string) string {
	if len(msg) > len(notPermitted) && msg[len(msg)-len(notPermitted):] == notPermitted {
		return msg[:len(msg)-len(notPermitted)]
	}
	return msg
}

// TargetPermissionChanged re-evaluates the inventories that may aggregate a target.
func (r *InventoryReconciler) TargetPermissionChanged(ctx context.Context, key collector.TargetKey) {
	for _, k := range r.inventoriesNear(ctx, key.Namespace) {
		select {
		case r.Changed <- eventOf(k):
		default:
			go func() { r.Changed <- eventOf(k) }()
		}
	}
}

// allInventories lists every inventory, for cluster scope changes.
func (r *InventoryReconciler) allInventories(ctx context.Context, _ client.Object) []inventory.Key {
	var out []inventory.Key
	var list kollectv1.KollectInventoryList
	if err := r.List(ctx, &list); err == nil {
		for _, i := range list.Items {
			out = append(out, inventory.Key{Namespace: i.Namespace, Name: i.Name})
		}
	}
	return append(out, r.inventoriesNear(ctx, "")...)
}

func eventOf(k inventory.Key) event.TypedGenericEvent[inventory.Key] {
	return event.TypedGenericEvent[inventory.Key]{Object: k}
}
