package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"kollect.dev/agent/internal/profile"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// Profiles caches compiled profiles by namespace/name; a profile is compiled once per
// generation, however many targets use it.
type Profiles struct {
	mu       sync.Mutex
	compiled map[client.ObjectKey]compiledEntry
}

type compiledEntry struct {
	generation int64
	uid        string
	c          *profile.Compiled
	err        error
}

// NewProfiles returns an empty cache.
func NewProfiles() *Profiles { return &Profiles{compiled: map[client.ObjectKey]compiledEntry{}} }

// Get compiles p unless its generation is already compiled.
func (ps *Profiles) Get(p *kollectv1.KollectProfile) (*profile.Compiled, error) {
	key := client.ObjectKeyFromObject(p)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if e, ok := ps.compiled[key]; ok && e.generation == p.Generation && e.uid == string(p.UID) {
		return e.c, e.err
	}
	c, err := profile.Compile(p)
	ps.compiled[key] = compiledEntry{generation: p.Generation, uid: string(p.UID), c: c, err: err}
	return c, err
}

// Forget drops a deleted profile.
func (ps *Profiles) Forget(key client.ObjectKey) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	delete(ps.compiled, key)
}

// ProfileKey identifies a profile generation in the collector: namespace/name@generation/uid.
func ProfileKey(p *kollectv1.KollectProfile) string {
	return fmt.Sprintf("%s/%s@%d/%s", p.Namespace, p.Name, p.Generation, p.UID)
}

// ProfileReconciler compiles profiles and reports compile errors, and quarantines over the
// cost budget, on their status.
type ProfileReconciler struct {
	client.Client
	Profiles *Profiles
	Elected  <-chan struct{}
	Recorder recorder.EventRecorder
	// Quarantined reports whether a profile generation (ProfileKey) is quarantined over its
	// cost budget; nil reports none.
	Quarantined func(profileKey string) (string, bool)
	// Refresh receives profiles whose quarantine changed (namespace/name).
	Refresh chan event.TypedGenericEvent[client.Object]
}

// Reconcile compiles one profile.
func (r *ProfileReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	p := &kollectv1.KollectProfile{}
	if err := r.Get(ctx, req.NamespacedName, p); err != nil {
		if apierrors.IsNotFound(err) {
			r.Profiles.Forget(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	c, err := r.Profiles.Get(p)
	if !elected(r.Elected) {
		return ctrl.Result{}, nil
	}
	before := p.DeepCopy()
	p.Status.ObservedGeneration = p.Generation
	var ce *profile.CompileError
	switch {
	case errors.As(err, &ce):
		setCondition(&p.Status.Conditions, p.Generation, kollectv1.ConditionReady, false, kollectv1.ReasonCompileFailed, err.Error())
		if before.Status.ObservedGeneration != p.Generation && r.Recorder != nil {
			r.Recorder.Eventf(p, nil, "Warning", kollectv1.ReasonCompileFailed, "Compile", "%s", eventNote(err.Error()))
		}
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("compiling %s: %w", req.NamespacedName, err)
	case r.quarantined(p):
		msg, _ := r.Quarantined(ProfileKey(p))
		p.Status.MetadataOnly = c.MetadataOnly
		prev := apimeta.FindStatusCondition(before.Status.Conditions, kollectv1.ConditionReady)
		setCondition(&p.Status.Conditions, p.Generation, kollectv1.ConditionReady, false, kollectv1.ReasonBudgetExceeded, msg)
		if r.Recorder != nil && (prev == nil || prev.Reason != kollectv1.ReasonBudgetExceeded) {
			r.Recorder.Eventf(p, nil, "Warning", kollectv1.ReasonBudgetExceeded, "Collect", "%s", eventNote(msg))
		}
	default:
		p.Status.MetadataOnly = c.MetadataOnly
		setCondition(&p.Status.Conditions, p.Generation, kollectv1.ConditionReady, true, kollectv1.ReasonCompiled,
			fmt.Sprintf("%d attributes compiled", len(p.Spec.Attributes)))
	}
	return ctrl.Result{}, patchStatusIfChanged(ctx, r.Client, before, p, func(o client.Object) any {
		return o.(*kollectv1.KollectProfile).Status
	})
}

func (r *ProfileReconciler) quarantined(p *kollectv1.KollectProfile) bool {
	if r.Quarantined == nil {
		return false
	}
	_, q := r.Quarantined(ProfileKey(p))
	return q
}

// SetupWithManager registers the reconciler; it runs on every replica, and writes status only
// on the leader: a standby compiles what it sees but writes nothing, so when it is elected it
// reconciles every profile again, or those it saw first as a standby would keep no status.
func (r *ProfileReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Refresh == nil {
		r.Refresh = make(chan event.TypedGenericEvent[client.Object], 1024)
	}
	err := ctrl.NewControllerManagedBy(mgr).For(&kollectv1.KollectProfile{}).Named("kollectprofile").
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false)}).
		WatchesRawSource(source.Channel(r.Refresh, &handler.EnqueueRequestForObject{})).
		Complete(r)
	if err != nil {
		return err
	}
	return mgr.Add(electionHook{elected: r.Elected, fn: r.refreshAll})
}

// refreshAll queues every profile, once this replica is elected.
func (r *ProfileReconciler) refreshAll(ctx context.Context) {
	var list kollectv1.KollectProfileList
	if err := r.List(ctx, &list); err != nil {
		return
	}
	for i := range list.Items {
		select {
		case r.Refresh <- event.TypedGenericEvent[client.Object]{Object: &list.Items[i]}:
		case <-ctx.Done():
			return
		}
	}
}
