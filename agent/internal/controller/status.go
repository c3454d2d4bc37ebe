package controller

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/collector"
	"kollect.dev/agent/internal/inventory"
)

// setCondition sets a condition; LastTransitionTime changes only when the status does, so an
// unchanged condition leaves the object byte-for-byte equal and no write happens.
func setCondition(conds *[]metav1.Condition, gen int64, typ string, status bool, reason, msg string) {
	s := metav1.ConditionFalse
	if status {
		s = metav1.ConditionTrue
	}
	apimeta.SetStatusCondition(conds, metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg, ObservedGeneration: gen})
}

// patchStatusIfChanged writes obj's status only when it differs from before (a deep copy of
// the object as read). It uses a merge patch so concurrent spec edits are never overwritten.
func patchStatusIfChanged(ctx context.Context, c client.Client, before, obj client.Object, statusOf func(client.Object) any) error {
	if equality.Semantic.DeepEqual(statusOf(before), statusOf(obj)) {
		return nil
	}
	if err := c.Status().Patch(ctx, obj, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("patching status of %s: %w", client.ObjectKeyFromObject(obj), err)
	}
	return nil
}

// elected reports whether this replica leads (status writes and exports are the leader's).
func elected(ch <-chan struct{}) bool {
	if ch == nil {
		return true
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// handlerQueue is the typed work queue handlers enqueue target keys on.
type handlerQueue = workqueue.TypedRateLimitingInterface[collector.TargetKey]

// invQueue is the typed work queue of inventory keys.
type invQueue = workqueue.TypedRateLimitingInterface[inventory.Key]
