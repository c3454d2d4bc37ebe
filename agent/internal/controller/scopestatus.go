package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// ScopeStatusReconciler reports on each KollectScope and KollectClusterScope how many Kollect
// objects it currently degrades: targets and inventories whose Degraded condition carries a
// Scope* reason and names the scope. Enforcement itself is in the target and inventory
// reconcilers; this only makes it visible from the scope's side (`kubectl get kscope`).
type ScopeStatusReconciler struct {
	client.Client
	Elected <-chan struct{}
}

// scopeKey identifies a scope; Namespace is empty for a KollectClusterScope.
type scopeKey = types.NamespacedName

// Reconcile counts one scope's violations and writes its status when it changed.
func (r *ScopeStatusReconciler) Reconcile(ctx context.Context, key scopeKey) (ctrl.Result, error) {
	if !elected(r.Elected) {
		return ctrl.Result{}, nil
	}
	var obj client.Object
	var status *kollectv1.KollectScopeStatus
	var name string
	if key.Namespace == "" {
		s := &kollectv1.KollectClusterScope{}
		obj, status, name = s, &s.Status, "KollectClusterScope "+key.Name
	} else {
		s := &kollectv1.KollectScope{}
		obj, status, name = s, &s.Status, "KollectScope "+key.Namespace+"/"+key.Name
	}
	if err := r.Get(ctx, key, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := obj.DeepCopyObject().(client.Object)
	n, err := r.violations(ctx, key.Namespace, name)
	if err != nil {
		return ctrl.Result{}, err
	}
	gen := obj.GetGeneration()
	status.ObservedGeneration, status.Violations = gen, n
	msg := "enforced at admission and at reconcile"
	if n > 0 {
		msg = fmt.Sprintf("%s; %d objects not permitted", msg, n)
	}
	setCondition(&status.Conditions, gen, kollectv1.ConditionReady, true, kollectv1.ReasonInForce, msg)
	statusOf := func(o client.Object) any {
		if s, ok := o.(*kollectv1.KollectScope); ok {
			return s.Status
		}
		return o.(*kollectv1.KollectClusterScope).Status
	}
	err = patchStatusIfChanged(ctx, r.Client, before, obj, statusOf)
	if apierrors.IsNotFound(err) {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, err
}

// violations counts degraded objects whose scope message names the scope; a cluster scope
// looks everywhere.
func (r *ScopeStatusReconciler) violations(ctx context.Context, ns, name string) (int32, error) {
	var opts []client.ListOption
	if ns != "" {
		opts = append(opts, client.InNamespace(ns))
	}
	var conds [][]metav1.Condition
	var targets kollectv1.KollectTargetList
	var inventories kollectv1.KollectInventoryList
	if err := errors.Join(r.List(ctx, &targets, opts...), r.List(ctx, &inventories, opts...)); err != nil {
		return 0, err
	}
	for _, t := range targets.Items {
		conds = append(conds, t.Status.Conditions)
	}
	for _, i := range inventories.Items {
		conds = append(conds, i.Status.Conditions)
	}
	if ns == "" {
		var ct kollectv1.KollectClusterTargetList
		var ci kollectv1.KollectClusterInventoryList
		if err := errors.Join(r.List(ctx, &ct), r.List(ctx, &ci)); err != nil {
			return 0, err
		}
		for _, t := range ct.Items {
			conds = append(conds, t.Status.Conditions)
		}
		for _, i := range ci.Items {
			conds = append(conds, i.Status.Conditions)
		}
	}
	var n int32
	for _, c := range conds {
		d := apimeta.FindStatusCondition(c, kollectv1.ConditionDegraded)
		if d != nil && d.Status == metav1.ConditionTrue && isScopeReason(d.Reason) && strings.Contains(d.Message, name+" ") {
			n++
		}
	}
	return n, nil
}

// SetupWithManager watches scopes and the objects they may degrade.
func (r *ScopeStatusReconciler) SetupWithManager(mgr ctrl.Manager) error {
	c, err := controller.NewTyped("kollectscope", mgr, controller.TypedOptions[scopeKey]{
		Reconciler: reconcile.TypedFunc[scopeKey](r.Reconcile), NeedLeaderElection: ptr.To(false),
	})
	if err != nil {
		return err
	}
	self := func(_ context.Context, o client.Object) []scopeKey {
		return []scopeKey{{Namespace: o.GetNamespace(), Name: o.GetName()}}
	}
	// A degraded object changes the count of the scopes of its namespace and of every
	// cluster scope.
	near := func(ctx context.Context, o client.Object) []scopeKey {
		var out []scopeKey
		if ns := o.GetNamespace(); ns != "" {
			var l kollectv1.KollectScopeList
			if r.List(ctx, &l, client.InNamespace(ns), client.UnsafeDisableDeepCopy) == nil {
				for _, s := range l.Items {
					out = append(out, scopeKey{Namespace: s.Namespace, Name: s.Name})
				}
			}
		}
		var cl kollectv1.KollectClusterScopeList
		if r.List(ctx, &cl, client.UnsafeDisableDeepCopy) == nil {
			for _, s := range cl.Items {
				out = append(out, scopeKey{Name: s.Name})
			}
		}
		return out
	}
	watch := watchMapped(mgr, c)
	return errors.Join(
		watch(&kollectv1.KollectScope{}, self),
		watch(&kollectv1.KollectClusterScope{}, self),
		watch(&kollectv1.KollectTarget{}, near),
		watch(&kollectv1.KollectClusterTarget{}, near),
		watch(&kollectv1.KollectInventory{}, near),
		watch(&kollectv1.KollectClusterInventory{}, near),
		mgr.Add(electionHook{elected: r.Elected, fn: func(ctx context.Context) { r.refreshAll(ctx) }}),
	)
}

// refreshAll runs once on election: a new leader writes the counts the previous one may have
// left stale.
func (r *ScopeStatusReconciler) refreshAll(ctx context.Context) {
	var l kollectv1.KollectScopeList
	var cl kollectv1.KollectClusterScopeList
	if r.List(ctx, &l) == nil {
		for _, s := range l.Items {
			_, _ = r.Reconcile(ctx, scopeKey{Namespace: s.Namespace, Name: s.Name})
		}
	}
	if r.List(ctx, &cl) == nil {
		for _, s := range cl.Items {
			_, _ = r.Reconcile(ctx, scopeKey{Name: s.Name})
		}
	}
}
