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
	return t.selects(obj, obj.GetName(), obj.Object, nsLabels)
}

// SelectsDecoded is Selects for a decoding target (profile.Compiled.Decode): names select name
// (the release's), the match expression reads doc, the decoded document, and is skipped when
// the object did not decode (doc nil) so that the failure is reported, as a watch does.
func (t *Target) SelectsDecoded(obj *unstructured.Unstructured, name string, doc map[string]any, nsLabels func(string) (labels.Set, bool)) bool {
	if doc == nil {
		m := *t
		m.match = nil
		return m.selects(obj, name, nil, nsLabels)
	}
	return t.selects(obj, name, doc, nsLabels)
}

func (t *Target) selects(obj *unstructured.Unstructured, name string, matchOn map[string]any, nsLabels func(string) (labels.Set, bool)) bool {
	if nsLabels == nil {
		nsLabels = func(string) (labels.Set, bool) { return nil, false }
	}
	if !t.selectsNamespace(obj.GetNamespace(), nsLabels) || !t.selectsName(name) {
		return false
	}
	if !t.labelSelector.Matches(labels.Set(obj.GetLabels())) {
		return false
	}
	if !t.fieldSelector.Empty() && !t.fieldSelector.Matches(fieldSet(obj.Object, t.fieldSelector)) {
		return false
	}
	if t.match != nil {
		ok, err := profile.EvalMatch(t.match, matchOn)
		return err == nil && ok
	}
	return true
}
