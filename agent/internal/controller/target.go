package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
	"kollect.dev/agent/internal/scope"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// kindRetry is how soon a target whose kind is unknown looks again (a CRD installed later).
const kindRetry = 10 * time.Second

// TargetReconciler registers KollectTargets and KollectClusterTargets with the collector and
// reports what they select.
type TargetReconciler struct {
	client.Client
	Mapper    apimeta.RESTMapper
	Profiles  *Profiles
	Collector *collector.Collector
	Elected   <-chan struct{}
	Recorder  recorder.EventRecorder
	// Scopes enforces KollectScopes; nil enforces nothing.
	Scopes *ScopeGate
	// Refresh receives targets whose counts may have changed (from the inventory manager).
	Refresh chan event.TypedGenericEvent[collector.TargetKey]
}

// targetObject abstracts over the two target kinds.
type targetObject struct {
	obj        client.Object
	profileRef types.NamespacedName
	selection  kollectv1.TargetSelection
	status     *kollectv1.KollectTargetStatus
	statusOf   func(client.Object) any
	// secretsConfined is set by register when the collector confines the target to the
	// namespaces opted in to Secret extraction (collector.Target.SecretsConfined).
	secretsConfined bool
}

func (r *TargetReconciler) load(ctx context.Context, key collector.TargetKey) (*targetObject, error) {
	nn := types.NamespacedName{Namespace: key.Namespace, Name: key.Name}
	if key.Namespace == "" {
		t := &kollectv1.KollectClusterTarget{}
		if err := r.Get(ctx, nn, t); err != nil {
			return nil, err
		}
		return &targetObject{obj: t, profileRef: types.NamespacedName{Namespace: t.Spec.ProfileRef.Namespace, Name: t.Spec.ProfileRef.Name},
			selection: t.Spec.TargetSelection, status: &t.Status,
			statusOf: func(o client.Object) any { return o.(*kollectv1.KollectClusterTarget).Status }}, nil
	}
	t := &kollectv1.KollectTarget{}
	if err := r.Get(ctx, nn, t); err != nil {
		return nil, err
	}
	return &targetObject{obj: t, profileRef: types.NamespacedName{Namespace: t.Namespace, Name: t.Spec.ProfileRef.Name},
		selection: t.Spec.TargetSelection, status: &t.Status,
		statusOf: func(o client.Object) any { return o.(*kollectv1.KollectTarget).Status }}, nil
}

// Reconcile handles one target; requests of cluster targets have an empty namespace.
func (r *TargetReconciler) Reconcile(ctx context.Context, key collector.TargetKey) (ctrl.Result, error) {
	t, err := r.load(ctx, key)
	if apierrors.IsNotFound(err) {
		r.Collector.RemoveTarget(key)
		r.Scopes.forgetTarget(key)
		return ctrl.Result{}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	before := t.obj.DeepCopyObject().(client.Object)
	result, ready, reason, msg, err := r.register(ctx, key, t)
	if err != nil {
		return ctrl.Result{}, err
	}
	// Every replica records permissions: a standby's inventories must leave the same rows out.
	if isScopeReason(reason) {
		r.Scopes.setTarget(key, scope.Decision{Reason: reason, Message: msg})
	} else {
		r.Scopes.setTarget(key, scope.Allow)
	}
	if !elected(r.Elected) {
		return result, nil
	}
	gen := t.obj.GetGeneration()
	t.status.ObservedGeneration = gen
	if prev := apimeta.FindStatusCondition(t.status.Conditions, kollectv1.ConditionReady); !ready && r.Recorder != nil &&
		reason != kollectv1.ReasonSyncing && (prev == nil || prev.Reason != reason || prev.Message != msg) {
		r.Recorder.Eventf(t.obj, nil, corev1.EventTypeWarning, reason, "Collect", "%s", eventNote(msg))
	}
	setCondition(&t.status.Conditions, gen, kollectv1.ConditionReady, ready, reason, msg)
	noteSecretsConfined(&t.status.Conditions, gen, t.secretsConfined)
	switch {
	case ready || reason == kollectv1.ReasonSyncing:
		r.reportSelection(key, t, gen)
	case isScopeReason(reason):
		// Counts stay as last reported: the objects still exist, they are just not permitted.
		setCondition(&t.status.Conditions, gen, kollectv1.ConditionDegraded, true, reason, msg)
	case reason == kollectv1.ReasonKindNotFound:
		// A kind the API server does not serve has no objects (deleting a CRD deletes them):
		// the counts are zero, not the last ones seen. Other failures keep them, as the
		// inventories keep the rows they count.
		t.status.ObjectCount, t.status.ErrorCount, t.status.TruncatedCount = 0, 0, 0
		apimeta.RemoveStatusCondition(&t.status.Conditions, kollectv1.ConditionDegraded)
	default:
		apimeta.RemoveStatusCondition(&t.status.Conditions, kollectv1.ConditionDegraded)
	}
	return result, patchStatusIfChanged(ctx, r.Client, before, t.obj, t.statusOf)
}

// register resolves the profile and the kind and hands the target to the collector.
func (r *TargetReconciler) register(ctx context.Context, key collector.TargetKey, t *targetObject) (ctrl.Result, bool, string, string, error) {
	res, ready, reason, msg := r.registerChecked(ctx, key, t)
	if reason == reasonScopeError {
		return res, false, "", "", errors.New(msg)
	}
	return res, ready, reason, msg, nil
}

// reasonScopeError marks a failure to load scopes; the reconcile is retried.
const reasonScopeError = "scope-error"

// notPermitted is appended to scope denials on targets: what the denial means for the data.
const notPermitted = "; not permitted: the target collects nothing and its rows are no longer exported"

func (r *TargetReconciler) registerChecked(ctx context.Context, key collector.TargetKey, t *targetObject) (ctrl.Result, bool, string, string) {
	prof := &kollectv1.KollectProfile{}
	if err := r.Get(ctx, t.profileRef, prof); err != nil {
		r.Collector.RemoveTarget(key)
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, false, kollectv1.ReasonProfileNotFound, fmt.Sprintf("KollectProfile %s not found", t.profileRef)
		}
		return ctrl.Result{}, false, kollectv1.ReasonProfileNotFound, err.Error()
	}
	compiled, err := r.Profiles.Get(prof)
	if err != nil {
		r.Collector.RemoveTarget(key)
		return ctrl.Result{}, false, kollectv1.ReasonProfileNotReady, fmt.Sprintf("KollectProfile %s does not compile: %v", t.profileRef, err)
	}
	gvk := schema.GroupVersionKind{Group: prof.Spec.Target.Group, Version: prof.Spec.Target.Version, Kind: prof.Spec.Target.Kind}
	rules, err := r.Scopes.Rules(ctx, key.Namespace)
	if err != nil {
		return ctrl.Result{}, false, reasonScopeError, err.Error()
	}
	if key.Namespace == "" {
		// A cluster target reads every namespace with its profile: whoever edits the profile
		// chooses what is extracted there, so it must not be a tenant.
		profileRules, err := r.Scopes.Rules(ctx, prof.Namespace)
		if err != nil {
			return ctrl.Result{}, false, reasonScopeError, err.Error()
		}
		if d := profileRules.ProfileForClusterTarget(t.profileRef.String()); !d.Allowed {
			r.Collector.RemoveTarget(key)
			return ctrl.Result{}, false, d.Reason, d.Message + notPermitted
		}
	}
	// The kind is checked before it is resolved so a denied kind never starts a watch.
	if d := rules.Kind(gvk.GroupKind()); !d.Allowed {
		r.Collector.RemoveTarget(key)
		return ctrl.Result{}, false, d.Reason, d.Message + notPermitted
	}
	mapping, err := r.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		r.Collector.RemoveTarget(key)
		if apimeta.IsNoMatchError(err) {
			return ctrl.Result{RequeueAfter: kindRetry}, false, kollectv1.ReasonKindNotFound,
				fmt.Sprintf("the API server does not serve %s (retrying every %s)", gvk, kindRetry)
		}
		return ctrl.Result{}, false, kollectv1.ReasonKindNotFound, err.Error()
	}
	namespaced := mapping.Scope.Name() == apimeta.RESTScopeNameNamespace
	if d := rules.Target(gvk.GroupKind(), namespaced, scope.TargetReach(key.Namespace, t.selection)); !d.Allowed {
		r.Collector.RemoveTarget(key)
		return ctrl.Result{}, false, d.Reason, d.Message + notPermitted
	}
	ref := collector.ProfileRef{Key: ProfileKey(prof), Name: prof.Namespace + "/" + prof.Name, Generation: prof.Generation}
	target, err := collector.NewTarget(key, t.selection, gvk, mapping.Resource, namespaced, ref, compiled)
	if err != nil {
		r.Collector.RemoveTarget(key)
		return ctrl.Result{}, false, kollectv1.ReasonInvalidSelection, err.Error()
	}
	r.Collector.SetTarget(target)
	t.secretsConfined = target.SecretsConfined()
	t.status.Resource = mapping.Resource.Resource + "." + mapping.Resource.Version
	if mapping.Resource.Group != "" {
		t.status.Resource += "." + mapping.Resource.Group
	}
	st, err := r.Collector.Selection(key)
	switch {
	case err != nil:
		return ctrl.Result{}, false, kollectv1.ReasonSyncing, err.Error()
	case st.Quarantined:
		return ctrl.Result{}, false, kollectv1.ReasonBudgetExceeded, st.Err.Error()
	case st.Forbidden:
		return ctrl.Result{}, false, kollectv1.ReasonForbidden, fmt.Sprintf("the agent may not list or watch %s: coverage unknown, "+
			"the rows of the last export are kept: %v", t.status.Resource, st.Err)
	case !st.Synced:
		msg := "waiting for the watch to sync"
		if st.Err != nil {
			return ctrl.Result{}, false, kollectv1.ReasonWatchFailed, st.Err.Error()
		}
		return ctrl.Result{}, false, kollectv1.ReasonSyncing, msg
	case st.Err != nil && apierrors.IsNotFound(st.Err):
		// The kind went away after the watch synced: its CRD was deleted (and with it its
		// objects). The mapping may still be cached, so the target is checked again.
		return ctrl.Result{RequeueAfter: kindRetry}, false, kollectv1.ReasonKindNotFound,
			fmt.Sprintf("the API server no longer serves %s (was its CRD deleted?): %v; retrying every %s", t.status.Resource, st.Err, kindRetry)
	}
	return ctrl.Result{}, true, kollectv1.ReasonWatching, fmt.Sprintf("watching %s", t.status.Resource)
}

// secretsConfinedMessage says what SecretsConfined means for the target's rows; it is stable,
// so the condition is written once.
var secretsConfinedMessage = fmt.Sprintf("the profile reads Secrets without decoding them: only Secrets in namespaces labelled %s=%s "+
	"are read and exported, Secrets elsewhere give no rows; a cluster admin labels a namespace to opt it in",
	kollectv1.LabelSecretExtraction, kollectv1.SecretExtractionAllowed)

// noteSecretsConfined sets SecretsConfined on a target that reads Secrets as they are, and
// removes it from any other. It is a note beside Ready, not a problem: the target collects.
func noteSecretsConfined(conds *[]metav1.Condition, gen int64, confined bool) {
	if !confined {
		apimeta.RemoveStatusCondition(conds, kollectv1.ConditionSecretsConfined)
		return
	}
	setCondition(conds, gen, kollectv1.ConditionSecretsConfined, true, kollectv1.ReasonSecretExtractionOptIn, secretsConfinedMessage)
}

// reportSelection fills counts and the Degraded condition from the collector.
func (r *TargetReconciler) reportSelection(key collector.TargetKey, t *targetObject, gen int64) {
	st, err := r.Collector.Selection(key)
	if err != nil || !st.Synced {
		return
	}
	t.status.ObjectCount = int64(st.Selected + len(st.Failed))
	t.status.ErrorCount = int64(len(st.Failed))
	t.status.TruncatedCount = int64(len(st.Truncated))
	// A match that fails (a misspelled field, a result that is not a boolean) would otherwise
	// look like one that selects nothing; it comes first, as it decides what is collected.
	var problems []string
	reason := kollectv1.ReasonNoProblems
	if n := len(st.MatchFailed); n > 0 {
		problems = append(problems, fmt.Sprintf("match %q failed on %d objects, not collected: %s", t.selection.Match, n, examples(st.MatchFailed)))
		reason = kollectv1.ReasonMatchFailed
	}
	if n := len(st.Failed); n > 0 {
		problems = append(problems, fmt.Sprintf("%d objects not exported: %s", n, examples(st.Failed)))
		if reason == kollectv1.ReasonNoProblems {
			reason = kollectv1.ReasonExtractionFailed
		}
	}
	if n := len(st.Truncated); n > 0 {
		problems = append(problems, fmt.Sprintf("%d objects exported cut to the profile's fullObject.maxBytes: %s", n, examples(st.Truncated)))
		if reason == kollectv1.ReasonNoProblems {
			reason = kollectv1.ReasonObjectsTruncated
		}
	}
	setCondition(&t.status.Conditions, gen, kollectv1.ConditionDegraded, len(problems) > 0, reason, strings.Join(problems, "; "))
}

// examples names the first three failed objects with their errors.
func examples(failed []collector.FailedObject) string {
	var out []string
	for i, f := range failed {
		if i == 3 {
			out = append(out, fmt.Sprintf("and %d more", len(failed)-3))
			break
		}
		out = append(out, fmt.Sprintf("%s: %v", strings.TrimPrefix(f.Namespace+"/"+f.Name, "/"), f.Err))
	}
	return strings.Join(out, "; ")
}

// targetWorkers reconcile targets at once. A target's reconcile is short on CPU and waits on
// its status patch; at start-up every target arrives at once, and each kind's watch starts only
// once its targets have all registered (collector.CoalesceOptions), so how fast that burst is
// worked through delays the first list.
const targetWorkers = 8

// SetupWithManager registers one controller per target kind, both running on every replica.
func (r *TargetReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Refresh == nil {
		r.Refresh = make(chan event.TypedGenericEvent[collector.TargetKey], 1024)
	}
	c, err := controller.NewTyped("kollecttarget", mgr, controller.TypedOptions[collector.TargetKey]{
		Reconciler:         reconcile.TypedFunc[collector.TargetKey](r.Reconcile),
		NeedLeaderElection: ptr.To(false), MaxConcurrentReconciles: targetWorkers,
	})
	if err != nil {
		return err
	}
	toKey := func(_ context.Context, o client.Object) []collector.TargetKey {
		return []collector.TargetKey{{Namespace: o.GetNamespace(), Name: o.GetName()}}
	}
	byProfile := func(ctx context.Context, o client.Object) []collector.TargetKey { return r.targetsOfProfile(ctx, o) }
	watch := watchMapped(mgr, c)
	return errors.Join(
		watch(&kollectv1.KollectTarget{}, toKey),
		watch(&kollectv1.KollectClusterTarget{}, toKey),
		watch(&kollectv1.KollectProfile{}, byProfile),
		watch(&kollectv1.KollectScope{}, r.targetsOfScope),
		watch(&kollectv1.KollectClusterScope{}, r.targetsOfScope),
		c.Watch(source.TypedChannel(r.Refresh, handler.TypedFuncs[collector.TargetKey, collector.TargetKey]{
			GenericFunc: func(_ context.Context, e event.TypedGenericEvent[collector.TargetKey], q handlerQueue) {
				q.AddAfter(e.Object, time.Second) // coalesce bursts of refreshes
			},
		})),
		// A standby writes no status: once elected, every target is reconciled again, or those
		// it saw first as a standby would keep none.
		mgr.Add(electionHook{elected: r.Elected, fn: r.refreshAll}),
	)
}

// refreshAll queues every target, once this replica is elected.
func (r *TargetReconciler) refreshAll(ctx context.Context) {
	var keys []collector.TargetKey
	var ts kollectv1.KollectTargetList
	if err := r.List(ctx, &ts); err == nil {
		for _, t := range ts.Items {
			keys = append(keys, collector.TargetKey{Namespace: t.Namespace, Name: t.Name})
		}
	}
	var cts kollectv1.KollectClusterTargetList
	if err := r.List(ctx, &cts); err == nil {
		for _, t := range cts.Items {
			keys = append(keys, collector.TargetKey{Name: t.Name})
		}
	}
	for _, k := range keys {
		select {
		case r.Refresh <- event.TypedGenericEvent[collector.TargetKey]{Object: k}:
		case <-ctx.Done():
			return
		}
	}
}

// targetsOfProfile lists the targets that use a profile.
func (r *TargetReconciler) targetsOfProfile(ctx context.Context, p client.Object) []collector.TargetKey {
	var out []collector.TargetKey
	var nsTargets kollectv1.KollectTargetList
	if err := r.List(ctx, &nsTargets, client.InNamespace(p.GetNamespace())); err == nil {
		for _, t := range nsTargets.Items {
			if t.Spec.ProfileRef.Name == p.GetName() {
				out = append(out, collector.TargetKey{Namespace: t.Namespace, Name: t.Name})
			}
		}
	}
	var clusterTargets kollectv1.KollectClusterTargetList
	if err := r.List(ctx, &clusterTargets); err == nil {
		for _, t := range clusterTargets.Items {
			if t.Spec.ProfileRef.Name == p.GetName() && t.Spec.ProfileRef.Namespace == p.GetNamespace() {
				out = append(out, collector.TargetKey{Name: t.Name})
			}
		}
	}
	return out
}

// targetsOfScope lists the targets a scope change may affect: those of the scope's namespace,
// or every target for a cluster scope.
func (r *TargetReconciler) targetsOfScope(ctx context.Context, sc client.Object) []collector.TargetKey {
	ns, all := scopeNamespaces(sc)
	var out []collector.TargetKey
	var opts []client.ListOption
	if !all {
		opts = append(opts, client.InNamespace(ns))
	}
	var nsTargets kollectv1.KollectTargetList
	if err := r.List(ctx, &nsTargets, opts...); err == nil {
		for _, t := range nsTargets.Items {
			out = append(out, collector.TargetKey{Namespace: t.Namespace, Name: t.Name})
		}
	}
	// Cluster targets: all of them for a cluster scope; for a KollectScope, those whose
	// profile lives in its namespace (a tenant's profile is refused to them).
	var clusterTargets kollectv1.KollectClusterTargetList
	if err := r.List(ctx, &clusterTargets); err == nil {
		for _, t := range clusterTargets.Items {
			if all || t.Spec.ProfileRef.Namespace == ns {
				out = append(out, collector.TargetKey{Name: t.Name})
			}
		}
	}
	return out
}
