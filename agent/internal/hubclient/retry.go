package hubclient

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// A bundle object whose apply fails (the API server refused the agent's write: Forbidden,
// a kind not served yet, a conflict, a webhook) is not given up until the next revision:
// the hub sends a configuration once, and an operator who fixes the agent's RBAC or installs
// a CRD must not have to restart every agent or upload a new revision for it to apply. It
// is retried with exponential backoff, and at once when the cause may be gone: a Forbidden
// object when a SelfSubjectAccessReview says the agent may now write it, a kind not served
// when discovery serves it. A watch on RBAC objects would need read access to every Role
// and binding of the cluster, and RBAC is not the only source of permissions (webhook
// authorizers, aggregated ClusterRoles); a SelfSubjectAccessReview asks the authorizer
// itself, needs no permission, and costs one request per refused resource and namespace
// every probe interval, only while something is refused. Refused objects (allowlist, scopes,
// takeover) are policy, not failures, and are not retried.

// retryPolicy is how often failed objects are retried.
type retryPolicy struct {
	// base is the first retry's delay, doubled at each failure up to max.
	base, max time.Duration
	// probe is how often a Forbidden or unserved object's cause is checked between retries.
	probe time.Duration
}

var defaultRetryPolicy = retryPolicy{base: 5 * time.Second, max: 5 * time.Minute, probe: 5 * time.Second}

// delay is the wait after the attempts-th failure: base, 2×base, … up to max.
func (p retryPolicy) delay(attempts int) time.Duration {
	d := p.base
	for i := 1; i < attempts && d < p.max; i++ {
		d *= 2
	}
	return min(d, p.max)
}

// failure is an object of the configuration in force whose last apply failed.
type failure struct {
	bundle   string
	u        *unstructured.Unstructured // stamped, ready to apply
	message  string
	err      error
	attempts int
	next     time.Time
}

func (f *failure) failedNow(message string, err error, now time.Time, p retryPolicy) {
	f.message, f.err = message, err
	f.attempts++
	f.next = now.Add(p.delay(f.attempts))
}

// probeable reports whether a failure's cause can be checked cheaply between retries.
func probeable(err error) bool { return apierrors.IsForbidden(err) || meta.IsNoMatchError(err) }

// applyOne applies one stamped object unless it would take over an object the hub did not
// create, logs the outcome when it changed, and returns its result with the API error of a
// failure. Called with opMu held.
func (a *Applier) applyOne(ctx context.Context, bundle string, u *unstructured.Unstructured) (*fleetv1.ObjectResult, error) {
	ref := refOf(u)
	reason, err := a.takeover(ctx, u)
	if err == nil && reason == "" {
		if err = a.apply(ctx, u); err == nil {
			a.appliedNow(bundle, u)
			return &fleetv1.ObjectResult{Object: ref, Result: fleetv1.ApplyResult_APPLY_RESULT_APPLIED}, nil
		}
	}
	if err != nil {
		a.notApplied(bundle, u, fleetv1.ApplyResult_APPLY_RESULT_FAILED, err.Error(), err)
		return &fleetv1.ObjectResult{Object: ref, Result: fleetv1.ApplyResult_APPLY_RESULT_FAILED, Message: err.Error()}, err
	}
	a.notApplied(bundle, u, fleetv1.ApplyResult_APPLY_RESULT_REFUSED, reason, nil)
	return &fleetv1.ObjectResult{Object: ref, Result: fleetv1.ApplyResult_APPLY_RESULT_REFUSED, Message: reason}, nil
}

// notApplied logs an object the agent did not apply, once per reason: the same failure at
// every retry, or the same refusal at every revision, would bury the change that matters.
// Failures are logged as errors (logr has no warning level, and an operator must act on
// them); refusals, which are the cluster owner's policy, at info. Called with opMu held.
func (a *Applier) notApplied(bundle string, u *unstructured.Unstructured, result fleetv1.ApplyResult, reason string, err error) {
	k := keyOf(u)
	if a.reported[k] == reason {
		return
	}
	a.reported[k] = reason
	kv := []any{"bundle", bundle, "kind", u.GetKind(), "name", nameOf(u)}
	if result == fleetv1.ApplyResult_APPLY_RESULT_FAILED {
		// The error is the reason, as the heartbeat reports it.
		a.log.Error(err, "hub object not applied; retrying with backoff", kv...)
		return
	}
	a.log.Info("hub object refused", append(kv, "reason", reason)...)
}

// appliedNow logs an object applied after it was reported not applied. Called with opMu held.
func (a *Applier) appliedNow(bundle string, u *unstructured.Unstructured) {
	k := keyOf(u)
	if prev, ok := a.reported[k]; ok {
		delete(a.reported, k)
		a.log.Info("hub object applied", "bundle", bundle, "kind", u.GetKind(), "name", nameOf(u), "previously", prev)
	}
}

// forgetReported drops the logged reasons of objects that are now applied or gone from the
// configuration, so that a new failure of theirs is logged again. Called with opMu held.
func (a *Applier) forgetReported(notApplied map[objectKey]bool) {
	maps.DeleteFunc(a.reported, func(k objectKey, _ string) bool { return !notApplied[k] })
}

// RetryFailed retries the failed objects that are due, or whose cause is gone, and reports
// whether any result changed (the hub should hear of it).
func (a *Applier) RetryFailed(ctx context.Context) bool {
	a.opMu.Lock()
	defer a.opMu.Unlock()
	a.mu.Lock()
	pending := maps.Clone(a.failed)
	a.mu.Unlock()
	keys := slices.SortedFunc(maps.Keys(pending), func(x, y objectKey) int {
		return strings.Compare(x.gvk.Kind+"/"+x.namespace+"/"+x.name, y.gvk.Kind+"/"+y.namespace+"/"+y.name)
	})
	probed := map[string]bool{}
	changed := false
	for _, k := range keys {
		f := pending[k]
		if time.Now().Before(f.next) && !a.causeGone(ctx, f, probed) {
			continue
		}
		res, err := a.applyOne(ctx, f.bundle, f.u)
		a.mu.Lock()
		switch res.GetResult() {
		case fleetv1.ApplyResult_APPLY_RESULT_APPLIED:
			a.desired[k] = f.u
			delete(a.failed, k)
		case fleetv1.ApplyResult_APPLY_RESULT_FAILED:
			next := *f
			next.failedNow(res.GetMessage(), err, time.Now(), a.retry)
			a.failed[k] = &next
		default:
			delete(a.failed, k)
		}
		changed = a.setResultLocked(f.bundle, res) || changed
		a.mu.Unlock()
	}
	return changed
}

// setResultLocked replaces an object's result in its bundle's results and reports whether it
// changed. The bundle's results are copied, never changed in place: a heartbeat may be
// sending the previous ones. Called with mu held.
func (a *Applier) setResultLocked(bundle string, res *fleetv1.ObjectResult) bool {
	ab := a.results[bundle]
	if ab == nil {
		return false
	}
	for i, o := range ab.GetObjects() {
		if !sameRef(o.GetObject(), res.GetObject()) || o.GetResult() == fleetv1.ApplyResult_APPLY_RESULT_PRUNED {
			continue
		}
		if o.GetResult() == res.GetResult() && o.GetMessage() == res.GetMessage() {
			return false
		}
		cp := proto.Clone(ab).(*fleetv1.AppliedBundle)
		cp.Objects[i] = res
		a.results[bundle] = cp
		return true
	}
	return false
}

// causeGone reports whether a failure's cause may be gone before its backoff ends: the
// agent may now get, create and patch the object (SelfSubjectAccessReview), or its kind is
// served now. probed caches the answers of one pass by verb, resource and namespace.
func (a *Applier) causeGone(ctx context.Context, f *failure, probed map[string]bool) bool {
	gvk := f.u.GroupVersionKind()
	mapping, err := a.c.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	switch {
	case meta.IsNoMatchError(f.err):
		return err == nil
	case !apierrors.IsForbidden(f.err) || err != nil:
		return false
	}
	for _, verb := range []string{"get", "create", "patch"} {
		key := verb + " " + mapping.Resource.Resource + " " + f.u.GetNamespace()
		allowed, ok := probed[key]
		if !ok {
			allowed = a.mayI(ctx, verb, mapping.Resource.Group, mapping.Resource.Resource, f.u.GetNamespace())
			probed[key] = allowed
		}
		if !allowed {
			return false
		}
	}
	return true
}

// mayI asks the API server's authorizer whether the agent may do verb on a resource.
func (a *Applier) mayI(ctx context.Context, verb, group, resource, namespace string) bool {
	r := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: group, Resource: resource, Namespace: namespace}}}
	if err := a.c.Create(ctx, r); err != nil {
		a.log.V(1).Info("asking whether the agent may write a failed hub object", "error", fmt.Sprint(err))
		return false
	}
	return r.Status.Allowed
}

// retryWait is how long the retry loop may sleep: until the next failure is due, or the next
// probe while a failure's cause can be probed; an hour when nothing failed (an apply that
// leaves failures wakes the loop).
func (a *Applier) retryWait(now time.Time) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	wait := time.Hour
	for _, f := range a.failed {
		wait = min(wait, f.next.Sub(now))
		if probeable(f.err) {
			wait = min(wait, a.retry.probe)
		}
	}
	return max(wait, 0)
}

// RunRetries retries failed objects until ctx ends, calling changed after a pass that changed
// a result. It runs beside the config stream, on the leader only.
func (a *Applier) RunRetries(ctx context.Context, changed func()) {
	for {
		t := time.NewTimer(a.retryWait(time.Now()))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-a.kick:
			t.Stop()
			continue
		case <-t.C:
		}
		if a.RetryFailed(ctx) && changed != nil {
			changed()
		}
	}
}
