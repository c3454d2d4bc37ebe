package controller

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"kollect.dev/agent/internal/collector"
	"kollect.dev/agent/internal/inventory"
	"kollect.dev/agent/internal/inventory/rollup"
	"kollect.dev/agent/internal/sink"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// InventoryReconciler configures inventories in the manager and reports their export state.
type InventoryReconciler struct {
	client.Client
	Manager  *inventory.Manager
	Sinks    *SinkBuilder
	Elected  <-chan struct{}
	Recorder recorder.EventRecorder
	// Scopes enforces KollectScopes; nil enforces nothing.
	Scopes *ScopeGate
	// Changed receives inventories whose status may have changed.
	Changed chan event.TypedGenericEvent[inventory.Key]

	mu    sync.Mutex
	built map[string]builtSink // by inventory|sinkRef
}

type builtSink struct {
	id string
	// policy is the sinkPolicy key the sink was built under.
	policy string
	sink   sink.Sink
	reads  *secretReads
	// last is the binding last made of it: a retiring inventory keeps exporting through it
	// when the sink object, its Secret or its scope are deleted with the inventory (a
	// namespace or a bundle deleted as a whole).
	last *inventory.SinkBinding
}

// inventoryObject abstracts over the two inventory kinds.
type inventoryObject struct {
	obj      client.Object
	timing   kollectv1.ExportTiming
	deletion kollectv1.InventoryDeletion
	// rollups are the inventory's rollups, their targets named as in rows.
	rollups    []rollup.Spec
	excludeRaw bool
	// retire is the deletion policy being applied; "" while the inventory lives.
	retire  kollectv1.DeletionPolicy
	suspend bool
	targets []collector.TargetKey
	missing []string
	// missingKeys are the named targets that do not exist. They stay in the inventory's
	// configuration so their last rows are kept: a missing target is unknown, not empty.
	missingKeys []collector.TargetKey
	// notes explain targets the collector may not collect (coverage); deniedTargets are
	// those scopes leave out; degradedTargets are targets whose own Degraded is True.
	notes           map[collector.TargetKey]inventory.TargetNote
	deniedTargets   map[collector.TargetKey]inventory.TargetNote
	degradedTargets []targetIssue
	sinks           []inventory.SinkRef
	// denied are scope problems: targets left out, sinks not bound, cadence raised.
	denied   []scopeProblem
	status   *kollectv1.KollectInventoryStatus
	statusOf func(client.Object) any
}

func (r *InventoryReconciler) load(ctx context.Context, key inventory.Key) (*inventoryObject, error) {
	nn := types.NamespacedName{Namespace: key.Namespace, Name: key.Name}
	if key.Namespace == "" {
		inv := &kollectv1.KollectClusterInventory{}
		if err := r.Get(ctx, nn, inv); err != nil {
			return nil, err
		}
		o := &inventoryObject{obj: inv, timing: inv.Spec.ExportTiming, deletion: inv.Spec.InventoryDeletion, suspend: inv.Spec.Suspend,
			status: &inv.Status, sinks: clusterSinkRefs(inv.Spec.Sinks),
			rollups: rollup.FromAPI(inv.Spec.Rollups, ""), excludeRaw: inv.Spec.ExcludesRaw(),
			statusOf: func(o client.Object) any { return o.(*kollectv1.KollectClusterInventory).Status }}
		return o, r.resolveClusterTargets(ctx, inv, o)
	}
	inv := &kollectv1.KollectInventory{}
	if err := r.Get(ctx, nn, inv); err != nil {
		return nil, err
	}
	o := &inventoryObject{obj: inv, timing: inv.Spec.ExportTiming, deletion: inv.Spec.InventoryDeletion, suspend: inv.Spec.Suspend,
		status: &inv.Status, sinks: sinkRefs(inv.Namespace, inv.Spec.Sinks),
		rollups: rollup.FromAPI(inv.Spec.Rollups, inv.Namespace), excludeRaw: inv.Spec.ExcludesRaw(),
		statusOf: func(o client.Object) any { return o.(*kollectv1.KollectInventory).Status }}
	return o, r.resolveTargets(ctx, inv, o)
}

func (r *InventoryReconciler) resolveTargets(ctx context.Context, inv *kollectv1.KollectInventory, o *inventoryObject) error {
	seen := map[collector.TargetKey]bool{}
	for _, ref := range inv.Spec.Targets {
		k := collector.TargetKey{Namespace: inv.Namespace, Name: ref.Name}
		t := &kollectv1.KollectTarget{}
		if err := r.Get(ctx, types.NamespacedName{Namespace: k.Namespace, Name: k.Name}, t); err != nil {
			if !apierrors.IsNotFound(err) {
				return err
			}
			o.missing = append(o.missing, "KollectTarget "+k.String())
			o.missingKeys = append(o.missingKeys, k)
			o.note(k, kollectv1.CoverageFailed, "KollectTarget "+k.String()+" not found")
			continue
		}
		seen[k] = true
		o.noteTarget(k, t.Status.Conditions)
	}
	if inv.Spec.TargetSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(inv.Spec.TargetSelector)
		if err != nil {
			return fmt.Errorf("targetSelector: %w", err)
		}
		var list kollectv1.KollectTargetList
		if err := r.List(ctx, &list, client.InNamespace(inv.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
			return err
		}
		for _, t := range list.Items {
			k := collector.TargetKey{Namespace: t.Namespace, Name: t.Name}
			seen[k] = true
			o.noteTarget(k, t.Status.Conditions)
		}
	}
	o.targets = sortedKeys(seen)
	return nil
}

func (r *InventoryReconciler) resolveClusterTargets(ctx context.Context, inv *kollectv1.KollectClusterInventory, o *inventoryObject) error {
	seen := map[collector.TargetKey]bool{}
	for _, ref := range inv.Spec.Targets {
		k := collector.TargetKey{Name: ref.Name}
		var obj client.Object = &kollectv1.KollectClusterTarget{}
		if ref.Kind == kollectv1.TargetKindNamespaced {
			k.Namespace, obj = ref.Namespace, &kollectv1.KollectTarget{}
		}
		if err := r.Get(ctx, types.NamespacedName{Namespace: k.Namespace, Name: k.Name}, obj); err != nil {
			if !apierrors.IsNotFound(err) {
				return err
			}
			o.missing = append(o.missing, string(ref.Kind)+" "+k.String())
			o.missingKeys = append(o.missingKeys, k)
			o.note(k, kollectv1.CoverageFailed, string(ref.Kind)+" "+k.String()+" not found")
			continue
		}
		seen[k] = true
		o.noteTarget(k, targetConditions(obj))
	}
	if inv.Spec.TargetSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(inv.Spec.TargetSelector)
		if err != nil {
			return fmt.Errorf("targetSelector: %w", err)
		}
		var list kollectv1.KollectClusterTargetList
		if err := r.List(ctx, &list, client.MatchingLabelsSelector{Selector: sel}); err != nil {
			return err
		}
		for _, t := range list.Items {
			seen[collector.TargetKey{Name: t.Name}] = true
			o.noteTarget(collector.TargetKey{Name: t.Name}, t.Status.Conditions)
		}
	}
	o.targets = sortedKeys(seen)
	return nil
}

// withMissing adds the named but missing targets to the inventory's targets. The collector
// does not know them, so the inventory carries their rows over from its last snapshot (as for
// a forbidden kind) until the reference is removed; Ready says TargetNotFound meanwhile.
func withMissing(targets, missing []collector.TargetKey) []collector.TargetKey {
	if len(missing) == 0 {
		return targets
	}
	seen := make(map[collector.TargetKey]bool, len(targets)+len(missing))
	for _, k := range targets {
		seen[k] = true
	}
	for _, k := range missing {
		seen[k] = true
	}
	return sortedKeys(seen)
}

func sortedKeys(m map[collector.TargetKey]bool) []collector.TargetKey {
	out := make([]collector.TargetKey, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// Reconcile configures one inventory and reports its state.
func (r *InventoryReconciler) Reconcile(ctx context.Context, key inventory.Key) (ctrl.Result, error) {
	o, err := r.load(ctx, key)
	if apierrors.IsNotFound(err) {
		r.Manager.Remove(key)
		r.forget(key)
		return ctrl.Result{}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	step, err := r.retirePrepare(ctx, o)
	switch {
	case err != nil:
		return ctrl.Result{}, err
	case step == retireGone:
		r.Manager.Remove(key)
		r.forget(key)
		return ctrl.Result{}, nil
	case step == retireRun:
		o.retire = o.deletion.Policy()
	}
	before := o.obj.DeepCopyObject().(client.Object)
	if err := r.applyScopes(ctx, key, o); err != nil {
		return ctrl.Result{}, err
	}
	bindings, sinkProblems := r.bindings(ctx, key, o)
	cfg := inventory.Config{
		Key: key, Generation: o.obj.GetGeneration(), Targets: withMissing(o.targets, o.missingKeys), Sinks: bindings,
		Debounce: o.timing.Debounce.Duration, MaxDelay: o.timing.MaxDelay.Duration, Suspend: o.suspend,
		Notes: o.notes, Denied: o.deniedTargets, Retire: o.retire, Rollups: o.rollups, ExcludeRaw: o.excludeRaw,
	}
	if o.timing.ResyncInterval != nil {
		cfg.Resync = o.timing.ResyncInterval.Duration
	}
	cfg.Confirm = kollectv1.DefaultConfirmInterval
	if o.timing.ConfirmInterval != nil {
		cfg.Confirm = o.timing.ConfirmInterval.Duration
	}
	r.Manager.Apply(cfg)
	// A new kollect.dev/resync-now value asks for a resync now. It is recorded in status once
	// acted on, so a restarted agent does not act on it again.
	request := o.obj.GetAnnotations()[kollectv1.AnnotationResyncNow]
	if request != "" && request != o.status.ResyncRequest && elected(r.Elected) {
		r.Manager.Resync(key)
		o.status.ResyncRequest = request
	}
	// A sink that could not be built (a Secret not there yet, a server down) is retried.
	var result ctrl.Result
	if len(sinkProblems) > 0 {
		result.RequeueAfter = sinkRetry
	}
	if !elected(r.Elected) {
		return result, nil
	}
	st, _ := r.Manager.Status(key)
	var retire retireView
	if o.retire != "" {
		retire = retireViewOf(o, st, time.Now())
	}
	fillInventoryStatus(o, st, sinkProblems, destinations(bindings), retire.message())
	if o.retire != "" {
		res, err := r.retireFinish(ctx, o, retire)
		if err != nil || o.obj.GetDeletionTimestamp() != nil && len(o.obj.GetFinalizers()) == 0 {
			return res, err // let go: the object is gone, or about to be, with its status
		}
		if result.RequeueAfter == 0 || (res.RequeueAfter > 0 && res.RequeueAfter < result.RequeueAfter) {
			result = res
		}
	}
	r.eventOnNewProblem(before, o)
	return result, patchStatusIfChanged(ctx, r.Client, before, o.obj, o.statusOf)
}

func errMessage(err error) string {
	if apierrors.IsNotFound(err) {
		return "not found"
	}
	return err.Error()
}

// SetupWithManager registers one controller for both inventory kinds, on every replica.
func (r *InventoryReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Changed == nil {
		r.Changed = make(chan event.TypedGenericEvent[inventory.Key], 1024)
	}
	c, err := controller.NewTyped("kollectinventory", mgr, controller.TypedOptions[inventory.Key]{
		Reconciler:         reconcile.TypedFunc[inventory.Key](r.Reconcile),
		NeedLeaderElection: ptr.To(false), MaxConcurrentReconciles: 2,
	})
	if err != nil {
		return err
	}
	self := func(_ context.Context, o client.Object) []inventory.Key {
		return []inventory.Key{{Namespace: o.GetNamespace(), Name: o.GetName()}}
	}
	related := func(ctx context.Context, o client.Object) []inventory.Key {
		return r.inventoriesNear(ctx, o.GetNamespace())
	}
	watch := watchMapped(mgr, c)
	return errors.Join(
		watch(&kollectv1.KollectInventory{}, self),
		watch(&kollectv1.KollectClusterInventory{}, self),
		watch(&kollectv1.KollectTarget{}, related),
		watch(&kollectv1.KollectClusterTarget{}, related),
		watch(&kollectv1.KollectSnapshotSink{}, related),
		watch(&kollectv1.KollectDatabaseSink{}, related),
		watch(&kollectv1.KollectEventSink{}, related),
		watch(&kollectv1.KollectScope{}, related),
		watch(&kollectv1.KollectClusterScope{}, r.allInventories),
		c.Watch(source.TypedChannel(r.Changed, handler.TypedFuncs[inventory.Key, inventory.Key]{
			GenericFunc: func(_ context.Context, e event.TypedGenericEvent[inventory.Key], q invQueue) {
				q.AddAfter(e.Object, 200*time.Millisecond) // coalesce worker and snapshot updates
			},
		})),
		mgr.Add(electionHook{elected: r.Elected, fn: func(ctx context.Context) { r.enqueueAll(ctx) }}),
	)
}

// eventOnNewProblem records a Warning event when the Degraded condition appears or its message
// changes, so `kubectl describe` and event-based alerting see every failure once.
func (r *InventoryReconciler) eventOnNewProblem(before client.Object, o *inventoryObject) {
	if r.Recorder == nil {
		return
	}
	now := apimeta.FindStatusCondition(o.status.Conditions, kollectv1.ConditionDegraded)
	if now == nil || now.Status != metav1.ConditionTrue {
		return
	}
	prev := apimeta.FindStatusCondition(o.statusOf(before).(kollectv1.KollectInventoryStatus).Conditions, kollectv1.ConditionDegraded)
	if prev != nil && prev.Status == now.Status && prev.Message == now.Message {
		return
	}
	r.Recorder.Eventf(o.obj, nil, corev1.EventTypeWarning, now.Reason, "Export", "%s", eventNote(now.Message))
}

// inventoriesNear lists the inventories a change in namespace ns may affect: those of the
// namespace and every cluster inventory.
func (r *InventoryReconciler) inventoriesNear(ctx context.Context, ns string) []inventory.Key {
	var out []inventory.Key
	if ns != "" {
		var list kollectv1.KollectInventoryList
		if err := r.List(ctx, &list, client.InNamespace(ns)); err == nil {
			for _, i := range list.Items {
				out = append(out, inventory.Key{Namespace: i.Namespace, Name: i.Name})
			}
		}
	}
	var cl kollectv1.KollectClusterInventoryList
	if err := r.List(ctx, &cl); err == nil {
		for _, i := range cl.Items {
			out = append(out, inventory.Key{Name: i.Name})
		}
	}
	return out
}

// enqueueAll refreshes every inventory, used when this replica becomes leader so it seeds its
// workers from the status the previous leader wrote.
func (r *InventoryReconciler) enqueueAll(ctx context.Context) {
	var list kollectv1.KollectInventoryList
	if err := r.List(ctx, &list); err == nil {
		for _, i := range list.Items {
			r.Changed <- event.TypedGenericEvent[inventory.Key]{Object: inventory.Key{Namespace: i.Namespace, Name: i.Name}}
		}
	}
	for _, k := range r.inventoriesNear(ctx, "") {
		r.Changed <- event.TypedGenericEvent[inventory.Key]{Object: k}
	}
}

// electionHook runs fn once this replica is elected.
type electionHook struct {
	elected <-chan struct{}
	fn      func(context.Context)
}

func (h electionHook) Start(ctx context.Context) error {
	if h.elected != nil {
		select {
		case <-ctx.Done():
			return nil
		case <-h.elected:
		}
	}
	h.fn(ctx)
	return nil
}

func (electionHook) NeedLeaderElection() bool { return false }
