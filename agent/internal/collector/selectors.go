package collector

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
)

func metav1LabelSelector(s *metav1.LabelSelector) (labels.Selector, error) {
	return metav1.LabelSelectorAsSelector(s)
}

// fieldSet builds the fields a field selector refers to from an object, so selectors that
// cannot go to the API server (the kind's targets disagree) are evaluated in the agent.
func fieldSet(obj map[string]any, sel fields.Selector) fields.Set {
	set := fields.Set{}
	for _, req := range sel.Requirements() {
		v, found, err := unstructured.NestedFieldNoCopy(obj, strings.Split(req.Field, ".")...)
		switch {
		case err != nil || !found || v == nil:
			set[req.Field] = ""
		default:
			set[req.Field] = fmt.Sprint(v)
		}
	}
	return set
}
