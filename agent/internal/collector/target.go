package collector

import (
	"fmt"
	"path"
	"strings"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"kollect.dev/agent/internal/profile"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// TargetKey identifies a target: Namespace is empty for a KollectClusterTarget.
type TargetKey struct {
	Namespace, Name string
}

// String is the target's name in rows: namespace/name for a KollectTarget, name for a
// KollectClusterTarget.
func (k TargetKey) String() string {
	if k.Namespace == "" {
		return k.Name
	}
	return k.Namespace + "/" + k.Name
}

// Target is a compiled target: which objects of which kind, extracted with which profile.
type Target struct {
	Key TargetKey
	// GVK is the profile's kind; Resource is its resolved resource.
	GVK        schema.GroupVersionKind
	Resource   schema.GroupVersionResource
	Namespaced bool
	// ProfileKey identifies the compiled profile (namespace/name@generation/uid).
	ProfileKey string
	Profile    *profile.Compiled
	// provenance is what the target's rows say about the profile that produced them.
	provenance ProfileRef

	// Namespace selection (namespaced kinds only). OwnNamespace restricts a KollectTarget
	// without an explicit selection to its own namespace.
	includeNS, excludeNS []string
	nsSelector           labels.Selector
	labelSelector        labels.Selector
	fieldSelector        fields.Selector
	includeNames         []string
	excludeNames         []string
	match                *profile.Match
	matchExpr            string
	// secretsConfined: the profile reads core v1 Secrets as they are (it does not decode
	// them), so the target selects only in namespaces labelled for it (secrets.go).
	secretsConfined bool
}

// ProfileRef names the profile generation a target extracts with.
type ProfileRef struct {
	// Key identifies the compiled generation in the collector (namespace/name@generation/uid):
	// a profile deleted and created again under its name is another profile.
	Key string
	// Name (namespace/name) and Generation are the provenance every row of the target carries.
	Name       string
	Generation int64
}

// NewTarget compiles a target's selection. ownNamespace is the namespace of a KollectTarget
// ("" for a cluster target).
func NewTarget(key TargetKey, sel kollectv1.TargetSelection, gvk schema.GroupVersionKind, gvr schema.GroupVersionResource,
	namespaced bool, ref ProfileRef, prof *profile.Compiled) (*Target, error) {
	t := &Target{Key: key, GVK: gvk, Resource: gvr, Namespaced: namespaced, ProfileKey: ref.Key, Profile: prof, provenance: ref,
		labelSelector: labels.Everything(), fieldSelector: fields.Everything()}
	if ns := sel.Namespaces; ns != nil {
		t.includeNS, t.excludeNS = ns.Include, ns.Exclude
		if ns.Selector != nil {
			s, err := metav1LabelSelector(ns.Selector)
			if err != nil {
				return nil, fmt.Errorf("namespaces.selector: %w", err)
			}
			t.nsSelector = s
		}
	}
	if len(t.includeNS) == 0 && t.nsSelector == nil && key.Namespace != "" {
		t.includeNS = []string{key.Namespace}
	}
	for _, pattern := range append(append([]string{}, t.includeNS...), t.excludeNS...) {
		if _, err := path.Match(pattern, ""); err != nil {
			return nil, fmt.Errorf("namespace pattern %q: %w", pattern, err)
		}
	}
	if sel.LabelSelector != nil {
		s, err := metav1LabelSelector(sel.LabelSelector)
		if err != nil {
			return nil, fmt.Errorf("labelSelector: %w", err)
		}
		t.labelSelector = s
	}
	if sel.FieldSelector != "" {
		s, err := fields.ParseSelector(sel.FieldSelector)
		if err != nil {
			return nil, fmt.Errorf("fieldSelector: %w", err)
		}
		t.fieldSelector = s
	}
	t.fieldSelector = decoderFieldSelector(prof, t.fieldSelector)
	t.secretsConfined = readsSecretsAsTheyAre(gvk, prof)
	if n := sel.Names; n != nil {
		t.includeNames, t.excludeNames = n.Include, n.Exclude
		for _, pattern := range append(append([]string{}, n.Include...), n.Exclude...) {
			if _, err := path.Match(pattern, ""); err != nil {
				return nil, fmt.Errorf("name pattern %q: %w", pattern, err)
			}
		}
	}
	if sel.Match != "" {
		prg, err := profile.CompileMatch(sel.Match)
		if err != nil {
			return nil, fmt.Errorf("match: %w", err)
		}
		t.match, t.matchExpr = prg, sel.Match
	}
	return t, nil
}

// NamespacePatterns returns the include patterns; a watch may be limited to these
// namespaces when they are plain names.
func (t *Target) NamespacePatterns() []string { return t.includeNS }

// Provenance names the profile generation the target's rows come from.
func (t *Target) Provenance() ProfileRef { return t.provenance }

// needsLabels reports whether selection must look at labels in the agent.
func (t *Target) needsLabels() bool { return !t.labelSelector.Empty() }

// selectsNamespace applies include/exclude patterns, the namespace selector and, for a target
// that reads Secrets as they are, the cluster admin's opt-in (checked first: it fails closed).
func (t *Target) selectsNamespace(ns string, nsLabels func(string) (labels.Set, bool)) bool {
	if t.secretsConfined && !secretExtractionAllowed(ns, nsLabels) {
		return false
	}
	if !t.Namespaced {
		return true
	}
	if len(t.includeNS) > 0 && !matchAny(t.includeNS, ns) {
		return false
	}
	if matchAny(t.excludeNS, ns) {
		return false
	}
	if t.nsSelector != nil {
		set, ok := nsLabels(ns)
		if !ok || !t.nsSelector.Matches(set) {
			return false
		}
	}
	return true
}

func (t *Target) selectsName(name string) bool {
	if len(t.includeNames) > 0 && !matchAny(t.includeNames, name) {
		return false
	}
	return !matchAny(t.excludeNames, name)
}

func matchAny(patterns []string, s string) bool {
	for _, p := range patterns {
		if p == s {
			return true
		}
		// Only a pattern can match a name other than itself; a plain name (a KollectTarget's
		// own namespace) is settled by the comparison, which a projection makes for every
		// object and every target of its kind.
		if strings.ContainsAny(p, `*?[\`) {
			if ok, _ := path.Match(p, s); ok {
				return true
			}
		}
	}
	return false
}

// selectionID captures the selection evaluated at snapshot time.
func (t *Target) selectionID() string {
	ns := ""
	if t.nsSelector != nil {
		ns = t.nsSelector.String()
	}
	return strings.Join([]string{strings.Join(t.includeNS, ","), strings.Join(t.excludeNS, ","), ns,
		strings.Join(t.includeNames, ","), strings.Join(t.excludeNames, ",")}, "|")
}

// projectionID captures everything the watch's transform depends on for this target; a change
// of it restarts the kind's watch. The whole selection is part of it: the transform evaluates a
// profile only on objects its targets select (project), so a target that selects more needs
// the objects it did not select evaluated.
func (t *Target) projectionID() string {
	return strings.Join([]string{t.Key.String(), t.ProfileKey, t.matchExpr, t.fieldSelector.String(), t.labelSelector.String(),
		t.selectionID()}, "|")
}
