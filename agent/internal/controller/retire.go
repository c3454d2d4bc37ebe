package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"kollect.dev/agent/internal/inventory"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// An inventory carries the finalizer kollectv1.FinalizerRetire from its first reconcile by
// the elected agent. Deleted, it retires: its last export applies the deletion policy in
// every sink (inventory/retire.go), and the finalizer goes once every sink took it, or once
// the deletion timeout passed, whichever comes first. A standby agent never touches it.

// retireStep is what the reconcile does with a loaded inventory before configuring it.
type retireStep int

const (
	retireNone retireStep = iota // live: export as usual
	retireRun                    // deleted: configure the retiring export
	retireGone                   // deleted and no longer ours to hold: stop it
)

// retirePrepare adds the finalizer to a live inventory (elected agents only), and says
// whether a deleted one retires or is done with.
func (r *InventoryReconciler) retirePrepare(ctx context.Context, o *inventoryObject) (retireStep, error) {
	if o.obj.GetDeletionTimestamp().IsZero() {
		if !elected(r.Elected) || controllerutil.ContainsFinalizer(o.obj, kollectv1.FinalizerRetire) {
			return retireNone, nil
		}
		orig := o.obj.DeepCopyObject().(client.Object)
		controllerutil.AddFinalizer(o.obj, kollectv1.FinalizerRetire)
		if err := r.Patch(ctx, o.obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return retireNone, fmt.Errorf("adding finalizer %s: %w", kollectv1.FinalizerRetire, err)
		}
		return retireNone, nil
	}
	if !controllerutil.ContainsFinalizer(o.obj, kollectv1.FinalizerRetire) {
		return retireGone, nil
	}
	return retireRun, nil
}

// retireView is how a retiring inventory stands: still waiting for its sinks, or done with
// (every sink took the last export, or the deadline passed).
type retireView struct {
	progress *inventory.RetireProgress
	deadline time.Time
	waiting  bool
}

func retireViewOf(o *inventoryObject, st inventory.Status, now time.Time) retireView {
	p := st.Retire
	if p == nil {
		p = &inventory.RetireProgress{Policy: o.deletion.Policy(), Pending: []string{"the last snapshot is not built yet"}}
	}
	deadline := o.obj.GetDeletionTimestamp().Add(o.deletion.Timeout())
	return retireView{progress: p, deadline: deadline, waiting: !p.Done && now.Before(deadline)}
}

// message is what Ready and Synced say while the inventory waits; "" once it is done with.
func (v retireView) message() string {
	if !v.waiting {
		return ""
	}
	return fmt.Sprintf("deleted, applying deletionPolicy %s in every sink until %s; waiting for: %s",
		v.progress.Policy, v.deadline.UTC().Format(time.RFC3339), strings.Join(v.progress.Pending, "; "))
}

// retireFinish lets a retiring inventory go when every sink took the last export or the
// timeout passed; its conditions say Retiring meanwhile (fillInventoryStatus). It returns
// when to look again.
func (r *InventoryReconciler) retireFinish(ctx context.Context, o *inventoryObject, v retireView) (ctrl.Result, error) {
	if v.waiting {
		return ctrl.Result{RequeueAfter: time.Until(v.deadline) + time.Second}, nil
	}
	p := v.progress
	log := logf.FromContext(ctx)
	if !p.Done {
		msg := fmt.Sprintf("deletionTimeout %s passed before every sink took the last export of deletionPolicy %s; "+
			"their data stays as it was: %s", o.deletion.Timeout(), p.Policy, strings.Join(p.Pending, "; "))
		r.Recorder.Eventf(o.obj, nil, corev1.EventTypeWarning, kollectv1.ReasonRetireTimedOut, "Retire", "%s", eventNote(msg))
		log.Info("gave up retiring an inventory", "pending", p.Pending, "policy", p.Policy)
	} else {
		log.Info("retired an inventory in every sink", "policy", p.Policy)
	}
	orig := o.obj.DeepCopyObject().(client.Object)
	controllerutil.RemoveFinalizer(o.obj, kollectv1.FinalizerRetire)
	// An object already gone has nothing left to remove; any other failure is retried.
	if err := r.Patch(ctx, o.obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, fmt.Errorf("removing finalizer %s: %w", kollectv1.FinalizerRetire, err)
	}
	return ctrl.Result{}, nil
}
