package controller

import (
	"context"
	"errors"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/sink"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// probeTimeout bounds a sink's connection test.
const probeTimeout = 15 * time.Second

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
	s, err := r.Sinks.build(ctx, so, "probe")
	if err == nil {
		defer s.Close()
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		err = s.Probe(pctx)
		cancel()
		if preview, perr := s.Preview(ctx, r.Sinks.cluster, "<inventory>"); perr == nil {
			so.status.Preview = &kollectv1.SinkPreview{Destination: preview.Destination, Paths: capList(preview.Paths),
				Message: preview.Message, Statements: capList(preview.Statements)}
		}
	}
	switch {
	case err == nil:
		setCondition(&so.status.Conditions, gen, kollectv1.ConditionReady, true, kollectv1.ReasonProbeSucceeded, "connection test passed")
	case sink.ClassOf(err) == sink.Terminal && isUnsupported(err):
		setCondition(&so.status.Conditions, gen, kollectv1.ConditionReady, false, kollectv1.ReasonUnsupportedType, err.Error())
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

var errUnsupported = errors.New("unsupported sink type")

func isUnsupported(err error) bool { return errors.Is(err, errUnsupported) }

func capList(in []string) []string {
	if len(in) > 20 {
		return in[:20]
	}
	return in
}

// SetupWithManager registers the reconciler; probing is the leader's job.
func (r *SinkReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(newSinkObject(r.Family)).Named("kollect" + string(r.Family) + "sink").Complete(r)
}
