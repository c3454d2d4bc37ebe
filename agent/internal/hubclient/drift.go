package hubclient

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"reflect"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// A hub-managed object drifts when anything other than the hub changes what the hub set: its
// spec, its labels (the managed-by label among them) or the annotations the bundle carries. The
// agent puts back the bundle's version and reports each revert to the hub, so that a cluster
// the hub shows in sync really holds the bundle. Annotations the bundle does not set (the
// resync-now trigger, kubectl's bookkeeping) are local business and stay.

// wrote records the resourceVersion of the applier's own write of an object.
func (a *Applier) wrote(k objectKey, resourceVersion string) {
	if resourceVersion == "" {
		return
	}
	a.mu.Lock()
	a.written[k] = resourceVersion
	a.mu.Unlock()
}

// desiredOf returns the desired version of an object when the hub manages it and the live
// version is not the applier's own last write.
func (a *Applier) desiredOf(k objectKey, liveVersion string) (*unstructured.Unstructured, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	want, ok := a.desired[k]
	if !ok || (liveVersion != "" && a.written[k] == liveVersion) {
		return nil, false
	}
	return want, true
}

// RevertDrift puts back the desired version of a hub-managed object that something other
// than the hub changed (kubectl edit, another controller), and reports whether it did. The
// object is read again once no apply runs: a version read before a new configuration was
// applied would look drifted against it.
func (a *Applier) RevertDrift(ctx context.Context, seen *unstructured.Unstructured) (bool, error) {
	a.opMu.Lock()
	defer a.opMu.Unlock()
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(seen.GroupVersionKind())
	if err := a.c.Get(ctx, client.ObjectKeyFromObject(seen), live); apierrors.IsNotFound(err) {
		return false, nil // the delete event restores it
	} else if err != nil {
		return false, fmt.Errorf("reading %s %s: %w", seen.GetKind(), nameOf(seen), err)
	}
	want, ok := a.desiredOf(keyOf(live), live.GetResourceVersion())
	if !ok || live.GetDeletionTimestamp() != nil {
		return false, nil
	}
	what := driftOf(live, want)
	if what == "" {
		return false, nil
	}
	// Replace the spec and labels wholesale: a server-side apply would keep what the editor
	// added.
	fresh := live.DeepCopy()
	fresh.Object["spec"] = want.DeepCopy().Object["spec"]
	fresh.SetLabels(want.GetLabels())
	fresh.SetAnnotations(mergeAnnotations(live.GetAnnotations(), want.GetAnnotations()))
	fresh.SetManagedFields(nil)
	if err := a.c.Update(ctx, fresh, client.FieldOwner(FieldManager)); apierrors.IsConflict(err) {
		return false, nil // changed again meanwhile: its watch event brings it back here
	} else if err != nil {
		err = fmt.Errorf("reverting %s %s (%s): %w", live.GetKind(), nameOf(live), what, err)
		a.record(want, fleetv1.ApplyResult_APPLY_RESULT_FAILED, err.Error())
		return false, err
	}
	a.wrote(keyOf(live), fresh.GetResourceVersion())
	// Own the fields again through apply so later revisions apply cleanly.
	if err := a.apply(ctx, want); err != nil {
		return true, err
	}
	a.record(want, fleetv1.ApplyResult_APPLY_RESULT_DRIFT_REVERTED, what+"; reverted")
	a.log.Info("reverted local drift of a hub-managed object", "kind", live.GetKind(), "name", nameOf(live), "drift", what)
	return true, nil
}

// Restore re-creates a hub-managed object that was deleted locally, and reports whether it
// did. An object the hub no longer wants (pruned, or a bundle taken away) stays deleted.
func (a *Applier) Restore(ctx context.Context, gone *unstructured.Unstructured) (bool, error) {
	a.opMu.Lock()
	defer a.opMu.Unlock()
	want, ok := a.desiredOf(keyOf(gone), "")
	if !ok {
		return false, nil
	}
	probe := &unstructured.Unstructured{}
	probe.SetGroupVersionKind(want.GroupVersionKind())
	err := a.c.Get(ctx, client.ObjectKeyFromObject(want), probe)
	if err == nil {
		return false, nil // already back (re-created by hand, or a stale event)
	}
	if !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("checking deleted %s %s: %w", want.GetKind(), nameOf(want), err)
	}
	if err := a.apply(ctx, want); err != nil {
		err = fmt.Errorf("deleted locally and not re-created: %w", err)
		a.record(want, fleetv1.ApplyResult_APPLY_RESULT_FAILED, err.Error())
		return false, err
	}
	a.record(want, fleetv1.ApplyResult_APPLY_RESULT_DRIFT_REVERTED, "deleted locally; re-created")
	a.log.Info("re-created a hub-managed object deleted locally", "kind", want.GetKind(), "name", nameOf(want))
	return true, nil
}

// record sets the latest revert (or failure to revert) of an object in its bundle's results:
// one entry per object beside its apply result, however often it drifts.
func (a *Applier) record(want *unstructured.Unstructured, result fleetv1.ApplyResult, message string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if result == fleetv1.ApplyResult_APPLY_RESULT_DRIFT_REVERTED {
		a.drifts++
	}
	ab := a.results[want.GetLabels()[LabelBundle]]
	if ab == nil {
		return
	}
	entry := &fleetv1.ObjectResult{Object: refOf(want), Result: result, Message: message}
	for i, o := range ab.GetObjects() {
		if sameRef(o.GetObject(), entry.Object) && o.GetResult() != fleetv1.ApplyResult_APPLY_RESULT_APPLIED {
			ab.Objects[i] = entry
			return
		}
	}
	ab.Objects = append(ab.Objects, entry)
}

func sameRef(a, b *fleetv1.ObjectRef) bool {
	return a.GetKind() == b.GetKind() && a.GetNamespace() == b.GetNamespace() && a.GetName() == b.GetName()
}

// driftOf says how live differs from want, or returns "" when it does not.
func driftOf(live, want *unstructured.Unstructured) string {
	var what []string
	if editor := foreignSpecEditor(live); editor != "" {
		what = append(what, fmt.Sprintf("spec edited by %q", editor))
	} else if !contains(live.Object["spec"], want.Object["spec"]) {
		what = append(what, "spec changed locally")
	}
	wantLabels, liveLabels := want.GetLabels(), live.GetLabels()
	if v, ok := liveLabels[LabelManagedBy]; !ok {
		what = append(what, "label "+LabelManagedBy+" removed locally")
	} else if v != wantLabels[LabelManagedBy] {
		what = append(what, fmt.Sprintf("label %s set to %q %s", LabelManagedBy, v, by(live, "f:labels")))
	} else if !maps.Equal(liveLabels, wantLabels) {
		what = append(what, "labels changed "+by(live, "f:labels")+" ("+labelDiff(liveLabels, wantLabels)+")")
	}
	liveAnn := live.GetAnnotations()
	var ann []string
	for k, v := range want.GetAnnotations() {
		if got, ok := liveAnn[k]; !ok || got != v {
			ann = append(ann, k)
		}
	}
	if len(ann) > 0 {
		sort.Strings(ann)
		what = append(what, "annotations "+strings.Join(ann, ", ")+" changed "+by(live, "f:annotations"))
	}
	return strings.Join(what, "; ")
}

// contains reports whether live holds everything want sets. Fields want does not set (the
// API server's defaults) may be added; lists must have want's length.
func contains(live, want any) bool {
	switch w := want.(type) {
	case map[string]any:
		l, ok := live.(map[string]any)
		if !ok {
			return len(w) == 0 && live == nil
		}
		for k, wv := range w {
			if !contains(l[k], wv) {
				return false
			}
		}
		return true
	case []any:
		l, ok := live.([]any)
		if !ok || len(l) != len(w) {
			return false
		}
		for i := range w {
			if !contains(l[i], w[i]) {
				return false
			}
		}
		return true
	case nil:
		return true
	default:
		return reflect.DeepEqual(number(live), number(want))
	}
}

// number makes a JSON number comparable whichever decoder produced it.
func number(v any) any {
	switch n := v.(type) {
	case int64:
		return float64(n)
	case int:
		return float64(n)
	case int32:
		return float64(n)
	}
	return v
}

func labelDiff(live, want map[string]string) string {
	var parts []string
	for k, v := range want {
		if got, ok := live[k]; !ok {
			parts = append(parts, "-"+k)
		} else if got != v {
			parts = append(parts, "~"+k)
		}
	}
	for k := range live {
		if _, ok := want[k]; !ok {
			parts = append(parts, "+"+k)
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// foreignSpecEditor returns the field manager, other than the hub, that last wrote the spec.
func foreignSpecEditor(u *unstructured.Unstructured) string { return foreignOwner(u, "f:spec") }

// foreignOwner returns the first field manager, other than the hub, owning a field set named
// field (f:spec, f:labels, f:annotations) of the object's main resource, or "".
func foreignOwner(u *unstructured.Unstructured, field string) string {
	marker := []byte(`"` + field + `"`)
	for _, mf := range u.GetManagedFields() {
		if mf.Manager == FieldManager || mf.Subresource != "" || mf.FieldsV1 == nil {
			continue
		}
		if bytes.Contains(mf.FieldsV1.Raw, marker) {
			return mf.Manager
		}
	}
	return ""
}

// by names who made a change when a field manager owns what changed. Removing a field
// leaves the remover owning nothing, so a removal is only known to be local.
func by(u *unstructured.Unstructured, field string) string {
	if m := foreignOwner(u, field); m != "" {
		return fmt.Sprintf("by %q", m)
	}
	return "locally"
}

func mergeAnnotations(live, want map[string]string) map[string]string {
	out := map[string]string{}
	maps.Copy(out, live)
	maps.Copy(out, want)
	return out
}
