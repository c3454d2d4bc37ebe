package hubclient

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/hubclient/manifests"
	kollectv1 "kollect.dev/api/v1alpha1"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

type objectKey struct {
	gvk       schema.GroupVersionKind
	namespace string
	name      string
}

func keyOf(u *unstructured.Unstructured) objectKey {
	return objectKey{gvk: u.GroupVersionKind(), namespace: u.GetNamespace(), name: u.GetName()}
}

// Applier makes the cluster hold exactly the objects of the assigned bundles.
type Applier struct {
	c     client.Client
	allow manifests.Allowlist
	log   logr.Logger

	// opMu serialises writes: a configuration apply, a drift revert and a restore of a
	// deleted object never interleave, so a restore cannot resurrect what an apply prunes.
	opMu sync.Mutex

	mu      sync.Mutex
	desired map[objectKey]*unstructured.Unstructured
	results map[string]*fleetv1.AppliedBundle // by bundle
	digest  string
	drifts  int
	// written holds the resourceVersion of the applier's own last write of each object, so
	// that the watch events of those writes are never mistaken for local edits.
	written map[objectKey]string
	// failed holds the objects of the configuration in force whose apply failed: they are
	// retried (see retry.go) until they apply, are refused, or leave the configuration.
	failed map[objectKey]*failure
	// reported is the last reason logged for each object not applied: a reason is logged
	// when it changes, not at every apply or retry of the same configuration.
	reported map[objectKey]string
	// kick wakes the retry loop when an apply leaves new failures.
	kick  chan struct{}
	retry retryPolicy
}

// NewApplier returns an applier for the given client.
func NewApplier(c client.Client, o Options) *Applier {
	return &Applier{c: c, allow: o.Allowlist(), log: o.Log,
		desired: map[objectKey]*unstructured.Unstructured{}, results: map[string]*fleetv1.AppliedBundle{},
		written: map[objectKey]string{}, failed: map[objectKey]*failure{}, reported: map[objectKey]string{},
		kick: make(chan struct{}, 1), retry: defaultRetryPolicy}
}

// Apply applies a complete desired configuration and prunes what it no longer holds. Per-object
// failures are recorded in the results; the returned error is only for failures to talk to
// the API server about pruning.
func (a *Applier) Apply(ctx context.Context, cfg *fleetv1.WatchConfigResponse) error {
	a.opMu.Lock()
	defer a.opMu.Unlock()
	desired := map[objectKey]*unstructured.Unstructured{}
	results := map[string]*fleetv1.AppliedBundle{}
	failed := map[objectKey]*failure{}
	notApplied := map[objectKey]bool{}
	for _, b := range cfg.GetBundles() {
		ab := &fleetv1.AppliedBundle{Bundle: b.GetBundle(), Revision: b.GetRevision(), Digest: b.GetDigest()}
		results[b.GetBundle()] = ab
		objs, err := manifests.Decode(b.GetManifests())
		if err != nil {
			ab.Objects = append(ab.Objects, &fleetv1.ObjectResult{Result: fleetv1.ApplyResult_APPLY_RESULT_FAILED,
				Message: "bundle manifests do not decode: " + err.Error()})
			continue
		}
		for _, u := range objs {
			if reason := a.allow.Refuse(u); reason != "" {
				a.notApplied(b.GetBundle(), u, fleetv1.ApplyResult_APPLY_RESULT_REFUSED, reason, nil)
				notApplied[keyOf(u)] = true
				ab.Objects = append(ab.Objects, &fleetv1.ObjectResult{Object: refOf(u), Result: fleetv1.ApplyResult_APPLY_RESULT_REFUSED, Message: reason})
				continue
			}
			a.stamp(u, b)
			res, applyErr := a.applyOne(ctx, b.GetBundle(), u)
			ab.Objects = append(ab.Objects, res)
			switch k := keyOf(u); res.GetResult() {
			case fleetv1.ApplyResult_APPLY_RESULT_APPLIED:
				desired[k] = u
			case fleetv1.ApplyResult_APPLY_RESULT_FAILED:
				f := &failure{bundle: b.GetBundle(), u: u}
				if prev := a.failed[k]; prev != nil && prev.message == res.GetMessage() {
					f.attempts = prev.attempts // the same failure again: its backoff goes on
				}
				f.failedNow(res.GetMessage(), applyErr, time.Now(), a.retry)
				failed[k] = f
				notApplied[k] = true
			default:
				notApplied[k] = true
			}
		}
	}
	a.forgetReported(notApplied)
	// The new desired set is in force before pruning starts: the deletions prune makes are
	// then not taken for local deletions to restore.
	a.mu.Lock()
	a.desired = desired
	a.failed = failed
	a.mu.Unlock()
	if len(failed) > 0 {
		select {
		case a.kick <- struct{}{}:
		default:
		}
	}
	// An object whose apply failed is still wanted: pruning keeps what the cluster holds of it.
	keep := maps.Clone(desired)
	for k, f := range failed {
		keep[k] = f.u
	}
	pruned, err := a.prune(ctx, keep)
	for _, p := range pruned {
		bundle := p.GetLabels()[LabelBundle]
		ab := results[bundle]
		if ab == nil {
			ab = &fleetv1.AppliedBundle{Bundle: bundle}
			results[bundle] = ab
		}
		ab.Objects = append(ab.Objects, &fleetv1.ObjectResult{Object: refOf(p), Result: fleetv1.ApplyResult_APPLY_RESULT_PRUNED})
	}
	a.mu.Lock()
	a.results = results
	if err == nil {
		a.digest = cfg.GetConfigDigest()
	}
	a.mu.Unlock()
	return err
}

// stamp marks an object as hub-managed with its bundle and revision.
func (a *Applier) stamp(u *unstructured.Unstructured, b *fleetv1.BundleAssignment) {
	labels := u.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelManagedBy], labels[LabelBundle] = managedByValue, b.GetBundle()
	u.SetLabels(labels)
	ann := u.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[AnnotationRevision], ann[AnnotationDigest] = strconv.FormatInt(b.GetRevision(), 10), b.GetDigest()
	u.SetAnnotations(ann)
	// Fields the API server owns must not be in an apply configuration.
	u.SetResourceVersion("")
	u.SetUID("")
	unstructured.RemoveNestedField(u.Object, "status")
}

// takeover explains why applying u would take over an object the hub did not create, or
// returns "". Server-side apply with ForceOwnership would silently take any object of the same
// name, and drift revert and pruning would then undo and delete the owner's work: an object
// that exists is the hub's only when it carries the hub's label or the hub's field manager
// already owns some of it (an object the hub created whose label was removed locally).
func (a *Applier) takeover(ctx context.Context, u *unstructured.Unstructured) (string, error) {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(u.GroupVersionKind())
	switch err := a.c.Get(ctx, client.ObjectKeyFromObject(u), live); {
	case apierrors.IsNotFound(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("reading %s %s before applying it: %w", u.GetKind(), nameOf(u), err)
	}
	if live.GetLabels()[LabelManagedBy] == managedByValue {
		return "", nil
	}
	for _, mf := range live.GetManagedFields() {
		if mf.Manager == FieldManager {
			return "", nil
		}
	}
	return fmt.Sprintf("%s %s exists and was not created by the hub: the agent never takes over an object it did not create (rename the bundle's object, or delete the local one)",
		u.GetKind(), nameOf(u)), nil
}

// apply is a server-side apply that takes ownership of every field it sets. Applying an
// unchanged object is a no-op for the API server: nothing is written.
func (a *Applier) apply(ctx context.Context, u *unstructured.Unstructured) error {
	obj := u.DeepCopy()
	if err := a.c.Patch(ctx, obj, client.Apply, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("server-side apply of %s %s: %w", u.GetKind(), nameOf(u), err)
	}
	a.wrote(keyOf(u), obj.GetResourceVersion())
	return nil
}

// prune deletes hub-managed objects that the desired configuration does not hold, where the
// agent's bundles may place objects (Allowlist.Holds).
func (a *Applier) prune(ctx context.Context, desired map[objectKey]*unstructured.Unstructured) ([]*unstructured.Unstructured, error) {
	var pruned []*unstructured.Unstructured
	var errs []error
	for _, k := range kollectv1.Kinds {
		kind := k.Kind
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(kollectv1.GroupVersion.WithKind(kind + "List"))
		if err := a.c.List(ctx, list, client.MatchingLabels{LabelManagedBy: managedByValue}); err != nil {
			errs = append(errs, fmt.Errorf("listing hub-managed %s: %w", kind, err))
			continue
		}
		for i := range list.Items {
			u := &list.Items[i]
			if _, ok := desired[keyOf(u)]; ok || !a.allow.Holds(u) {
				continue
			}
			if err := a.c.Delete(ctx, u); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("pruning %s %s: %w", kind, nameOf(u), err))
				continue
			}
			a.log.Info("pruned hub-managed object", "kind", kind, "name", nameOf(u))
			pruned = append(pruned, u)
		}
	}
	return pruned, errors.Join(errs...)
}

// Snapshot returns the applied bundles (sorted) and the digest of the last complete apply.
func (a *Applier) Snapshot() ([]*fleetv1.AppliedBundle, string, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]*fleetv1.AppliedBundle, 0, len(a.results))
	for _, b := range a.results {
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetBundle() < out[j].GetBundle() })
	return out, a.digest, a.drifts
}

// Managed reports whether key is one of the desired objects.
func (a *Applier) Managed(gvk schema.GroupVersionKind, nn types.NamespacedName) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.desired[objectKey{gvk: gvk, namespace: nn.Namespace, name: nn.Name}]
	return ok
}

func refOf(u *unstructured.Unstructured) *fleetv1.ObjectRef {
	return &fleetv1.ObjectRef{ApiVersion: u.GetAPIVersion(), Kind: u.GetKind(), Namespace: u.GetNamespace(), Name: u.GetName()}
}

func nameOf(u metav1.Object) string {
	if u.GetNamespace() == "" {
		return u.GetName()
	}
	return u.GetNamespace() + "/" + u.GetName()
}
