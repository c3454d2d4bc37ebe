package labelsel

import (
	"encoding/json"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// FromProto converts and validates a protocol selector; nil selects every cluster.
func FromProto(in *fleetv1.LabelSelector) (*metav1.LabelSelector, error) {
	out := &metav1.LabelSelector{}
	if in == nil {
		return out, nil
	}
	if len(in.GetMatchLabels()) > 0 {
		out.MatchLabels = in.GetMatchLabels()
	}
	for _, r := range in.GetMatchExpressions() {
		out.MatchExpressions = append(out.MatchExpressions, metav1.LabelSelectorRequirement{
			Key: r.GetKey(), Operator: metav1.LabelSelectorOperator(r.GetOperator()), Values: r.GetValues(),
		})
	}
	if _, err := metav1.LabelSelectorAsSelector(out); err != nil {
		return nil, fmt.Errorf("invalid cluster selector: %w", err)
	}
	return out, nil
}

// ToProto converts a stored selector back to the protocol's form.
func ToProto(in *metav1.LabelSelector) *fleetv1.LabelSelector {
	out := &fleetv1.LabelSelector{MatchLabels: in.MatchLabels}
	for _, r := range in.MatchExpressions {
		out.MatchExpressions = append(out.MatchExpressions, &fleetv1.LabelSelectorRequirement{
			Key: r.Key, Operator: string(r.Operator), Values: r.Values,
		})
	}
	return out
}

// Encode returns the selector's canonical JSON (map keys sorted), as stored.
func Encode(sel *metav1.LabelSelector) (string, error) {
	raw, err := json.Marshal(sel)
	if err != nil {
		return "", fmt.Errorf("encoding selector: %w", err)
	}
	return string(raw), nil
}

// Decode parses a stored selector.
func Decode(raw string) (*metav1.LabelSelector, error) {
	sel := &metav1.LabelSelector{}
	if raw == "" {
		return sel, nil
	}
	if err := json.Unmarshal([]byte(raw), sel); err != nil {
		return nil, fmt.Errorf("decoding selector %q: %w", raw, err)
	}
	return sel, nil
}

// parsed caches compiled selectors by their JSON: the store matches one selector against
// every cluster, and a fleet has few distinct selectors.
var parsed sync.Map // string → labels.Selector

// Match reports whether the stored selector selects a cluster with these labels. It has the
// shape of store.Matcher.
func Match(selectorJSON string, clusterLabels map[string]string) (bool, error) {
	if v, ok := parsed.Load(selectorJSON); ok {
		return v.(labels.Selector).Matches(labels.Set(clusterLabels)), nil
	}
	ls, err := Decode(selectorJSON)
	if err != nil {
		return false, err
	}
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return false, fmt.Errorf("compiling selector %s: %w", selectorJSON, err)
	}
	parsed.Store(selectorJSON, sel)
	return sel.Matches(labels.Set(clusterLabels)), nil
}

// ParseQuery parses the Kubernetes selector syntax of list filters ("env=prod,tier in (a)").
func ParseQuery(q string) (labels.Selector, error) {
	sel, err := labels.Parse(q)
	if err != nil {
		return nil, fmt.Errorf("invalid label selector %q: %w", q, err)
	}
	return sel, nil
}

// ValidateLabels checks cluster labels with Kubernetes label rules.
func ValidateLabels(l map[string]string) error {
	for k, v := range l {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("label key %q: %v", k, errs)
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return fmt.Errorf("label %s value %q: %v", k, v, errs)
		}
	}
	return nil
}
