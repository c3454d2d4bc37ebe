package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"kollect.dev/agent/internal/scope"
	"kollect.dev/agent/internal/sink"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// probeTimeout bounds a sink's connection test.
const probeTimeout = 15 * time.Second

// previewTimeout bounds a sink's preview, which may read the destination: a client that
// retries an unreachable endpoint until its context ends (BigQuery's does) must not hold the
// reconciler, and with it the probes of every other sink of the family, for ever.
const previewTimeout = 10 * time.Second

// probeConcurrency is how many sinks of a family are probed at once.
const probeConcurrency = 4

// SinkReconciler tests each sink's connection and previews what an export would write.
type SinkReconciler struct {
	client.Client
	Sinks  *SinkBuilder
	Family kollectv1.SinkFamily
	// Recheck is how often a healthy sink is probed again; failing ones retry sooner.
	Recheck time.Duration
}

// Reconcile probes one sink.
func (r *SinkReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obj := newSinkObject(r.Family)
	if err := r.Get(ctx, req.NamespacedName, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := obj.DeepCopyObject().(client.Object)
	so := asSinkObject(obj)
	gen := obj.GetGeneration()
	so.status.ObservedGeneration = gen
	retry := r.Recheck
	var denied *scope.DeniedError
	s, err := r.Sinks.build(ctx, so, "probe")
	if err == nil {
		defer s.Close()
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		err = s.Probe(pctx)
		cancel()
		vctx, cancel := context.WithTimeout(ctx, previewTimeout)
		so.status.Preview = r.preview(vctx, s, obj)
		cancel()
	}
	switch {
	case err == nil:
		setCondition(&so.status.Conditions, gen, kollectv1.ConditionReady, true, kollectv1.ReasonProbeSucceeded, "connection test passed")
	case sink.ClassOf(err) == sink.Terminal && isUnsupported(err):
		setCondition(&so.status.Conditions, gen, kollectv1.ConditionReady, false, kollectv1.ReasonUnsupportedType, err.Error())
	case errors.As(err, &denied):
		setCondition(&so.status.Conditions, gen, kollectv1.ConditionReady, false, denied.Decision.Reason, err.Error())
		retry = time.Minute
	default:
		setCondition(&so.status.Conditions, gen, kollectv1.ConditionReady, false, kollectv1.ReasonProbeFailed, err.Error())
		retry = time.Minute
	}
	if perr := patchStatusIfChanged(ctx, r.Client, before, obj, func(o client.Object) any { return *asSinkObject(o).status }); perr != nil {
		if apierrors.IsConflict(perr) {
			return ctrl.Result{Requeue: true}, nil
		}
		return ctrl.Result{}, perr
	}
	return ctrl.Result{RequeueAfter: retry}, nil
}

// preview describes what the next export to s would write, for the first (by name) of the
// inventories that use the sink; "<inventory>" stands in when none does yet.
func (r *SinkReconciler) preview(ctx context.Context, s sink.Sink, obj client.Object) *kollectv1.SinkPreview {
	users, err := inventoriesUsing(ctx, r.Client, r.Family, obj.GetNamespace(), obj.GetName())
	if err != nil {
		return nil
	}
	inventory, note := "<inventory>", "no inventory exports to this sink yet"
	if len(users) > 0 {
		inventory, note = users[0], "for inventory "+users[0]
		if len(users) > 1 {
			note += fmt.Sprintf(" (1 of %d using this sink)", len(users))
		}
	}
	p, err := s.Preview(ctx, r.Sinks.cluster, inventory)
	if err != nil {
		return nil
	}
	msg := note
	if p.Message != "" {
		msg += ": " + p.Message
	}
	return &kollectv1.SinkPreview{Destination: p.Destination, Paths: capList(p.Paths), Message: msg, Statements: capList(p.Statements)}
}

var errUnsupported = errors.New("unsupported sink type")

func isUnsupported(err error) bool { return errors.Is(err, errUnsupported) }

func capList(in []string) []string {
	if len(in) > 20 {
		return in[:20]
	}
	return in
}

// SetupWithManager registers the reconciler; probing is the leader's job. Every update of the
// sink object but its status is reconciled, metadata included, so that annotating it
// (kollect.dev/probe-now) probes at once; and an inventory that starts or stops using the sink
// refreshes its preview.
func (r *SinkReconciler) SetupWithManager(mgr ctrl.Manager) error {
	users := func(ctx context.Context, obj client.Object) []reconcile.Request {
		var reqs []reconcile.Request
		switch inv := obj.(type) {
		case *kollectv1.KollectInventory:
			for _, ref := range localRefs(inv.Spec.Sinks, r.Family) {
				reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: inv.Namespace, Name: ref.Name}})
			}
		case *kollectv1.KollectClusterInventory:
			for _, ref := range clusterRefs(inv.Spec.Sinks, r.Family) {
				reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}})
			}
		}
		return reqs
	}
	return ctrl.NewControllerManagedBy(mgr).For(newSinkObject(r.Family), builder.WithPredicates(probeTriggers)).
		Named("kollect"+string(r.Family)+"sink").
		// A probe of an unreachable endpoint takes up to probeTimeout and previewTimeout: a
		// few at once keep one such sink from delaying the probes of the family's others.
		WithOptions(controller.Options{MaxConcurrentReconciles: probeConcurrency}).
		Watches(&kollectv1.KollectInventory{}, handler.EnqueueRequestsFromMapFunc(users), builder.WithPredicates(usesChanged)).
		Watches(&kollectv1.KollectClusterInventory{}, handler.EnqueueRequestsFromMapFunc(users), builder.WithPredicates(usesChanged)).
		Complete(r)
}

// probeTriggers passes every sink event but an update of the status alone. The probe writes
// that status itself: passing it probed every sink twice, over a connection opened for each
// probe, at every start (100 tenants: 100 more PostgreSQL sessions while the watches listed).
var probeTriggers = predicate.Or[client.Object](predicate.GenerationChangedPredicate{},
	predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{})

// usesChanged passes an inventory event when the preview or health of its sinks may change: the
// inventory appeared or went, its spec changed (sinks added or removed), a sink accepted a new
// export (what the sink holds for it), or a sink's exports started or stopped failing (so that
// a sink in an outage does not stay Ready=True until its next scheduled probe). Other status
// updates pass nothing.
var usesChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	if e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() {
		return true
	}
	return !slices.Equal(acceptedChecksums(e.ObjectOld), acceptedChecksums(e.ObjectNew))
}}

func acceptedChecksums(obj client.Object) []string {
	var sinks []kollectv1.SinkExportStatus
	switch inv := obj.(type) {
	case *kollectv1.KollectInventory:
		sinks = inv.Status.Sinks
	case *kollectv1.KollectClusterInventory:
		sinks = inv.Status.Sinks
	}
	out := make([]string, len(sinks))
	for i, s := range sinks {
		out[i] = fmt.Sprintf("%s/%s/%s=%s failing=%t", s.Family, s.Namespace, s.Name, s.Checksum, s.LastError != "")
	}
	return out
}
