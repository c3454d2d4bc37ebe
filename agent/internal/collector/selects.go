package collector

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"kollect.dev/agent/internal/profile"
)

// Selects reports whether the target collects obj, applying every part of its selection the
// way a watch does (namespaces, names, label and field selectors, CEL match). nsLabels returns
// a namespace's labels for namespaces.selector; nil treats every namespace as unlabelled.
// It serves one-shot callers (the kollect CLI); watches keep their precomputed path.
func (t *Target) Selects(obj *unstructured.Unstructured, nsLabels func(string) (labels.Set, bool)) bool {
	if nsLabels == nil {
		nsLabels = func(string) (labels.Set, bool) { return nil, false }
	}
	if !t.selectsNamespace(obj.GetNamespace(), nsLabels) || !t.selectsName(obj.GetName()) {
		return false
	}
	if !t.labelSelector.Matches(labels.Set(obj.GetLabels())) {
		return false
	}
	if !t.fieldSelector.Empty() && !t.fieldSelector.Matches(fieldSet(obj.Object, t.fieldSelector)) {
		return false
	}
	if t.match != nil {
		ok, err := profile.EvalMatch(t.match, obj.Object)
		return err == nil && ok
	}
	return true
}
