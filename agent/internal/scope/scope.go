package scope

import (
	"fmt"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// A decision's Reason is one of the kollectv1.ReasonScope* reasons; it doubles as the condition
// reason on the denied object.

// Decision is the outcome of one check. A denial names the rule in Reason and Message.
type Decision struct {
	Allowed bool
	Reason  string
	Message string
}

// Allow is the decision of a check that passed.
var Allow = Decision{Allowed: true}

func deny(reason, format string, args ...any) Decision {
	return Decision{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// String renders a denial as "Reason: message", the form admission errors use.
func (d Decision) String() string {
	if d.Allowed {
		return "allowed"
	}
	return d.Reason + ": " + d.Message
}

// Err returns nil for an allowed decision and a *DeniedError otherwise.
func (d Decision) Err() error {
	if d.Allowed {
		return nil
	}
	return &DeniedError{Decision: d}
}

// DeniedError is a denial as an error.
type DeniedError struct{ Decision Decision }

func (e *DeniedError) Error() string { return e.Decision.String() }

// Set is every scope of a cluster plus the agent's tenant mode.
type Set struct {
	Scopes        []kollectv1.KollectScope
	ClusterScopes []kollectv1.KollectClusterScope
	TenantMode    bool
}

// rule is one governing scope with the name denials quote.
type rule struct {
	name string // "KollectScope team-a/limits" or "KollectClusterScope platform"
	spec *kollectv1.KollectScopeSpec
	// cluster is the whole spec of a KollectClusterScope, nil for a KollectScope: what only a
	// cluster scope may allow lives there.
	cluster *kollectv1.KollectClusterScopeSpec
}

// Rules are the scopes that govern one object, sorted, already intersected lazily: each check
// walks them in order and the first denial wins.
type Rules struct {
	rules []rule
	// missing is set in tenant mode when nothing governs the object: everything is denied
	// with this message.
	missing string
}

// Unrestricted reports whether no scope limits the object.
func (r Rules) Unrestricted() bool { return len(r.rules) == 0 && r.missing == "" }

// Governing names the scopes in force, in evaluation order.
func (r Rules) Governing() []string {
	out := make([]string, len(r.rules))
	for i, ru := range r.rules {
		out[i] = ru.name
	}
	return out
}

// ForNamespace returns the rules for namespaced Kollect objects in ns; nsLabels are the
// namespace's labels (for cluster scopes' namespaceSelector). The Set needs the KollectScopes
// of ns only (Load with client.InNamespace(ns)).
func (s Set) ForNamespace(ns string, nsLabels labels.Set) Rules {
	var out Rules
	out.rules = append(out.rules, s.clusterCeilings(ns, nsLabels)...)
	own := 0
	var local []rule
	for i := range s.Scopes {
		sc := &s.Scopes[i]
		if sc.Namespace != ns || sc.DeletionTimestamp != nil {
			continue
		}
		own++
		local = append(local, rule{name: "KollectScope " + sc.Namespace + "/" + sc.Name, spec: &sc.Spec})
	}
	sort.Slice(local, func(i, j int) bool { return local[i].name < local[j].name })
	out.rules = append(out.rules, local...)
	if s.TenantMode && own == 0 {
		out.missing = fmt.Sprintf("tenant mode: namespace %s has no KollectScope, so nothing is allowed", ns)
	}
	return out
}

// ForCluster returns the rules for cluster-scoped Kollect objects: every KollectClusterScope.
// Tenant mode does not deny them when there is none: only cluster administrators can write
// cluster-scoped kinds, and a scope they would have to write for themselves protects nothing.
func (s Set) ForCluster() Rules {
	var out Rules
	for i := range s.ClusterScopes {
		cs := &s.ClusterScopes[i]
		if cs.DeletionTimestamp != nil {
			continue
		}
		out.rules = append(out.rules, rule{name: "KollectClusterScope " + cs.Name, spec: &cs.Spec.KollectScopeSpec, cluster: &cs.Spec})
	}
	sort.Slice(out.rules, func(i, j int) bool { return out.rules[i].name < out.rules[j].name })
	return out
}

func (s Set) clusterCeilings(ns string, nsLabels labels.Set) []rule {
	var out []rule
	for i := range s.ClusterScopes {
		cs := &s.ClusterScopes[i]
		if cs.DeletionTimestamp != nil || !selects(cs.Spec.NamespaceSelector, nsLabels) {
			continue
		}
		out = append(out, rule{name: "KollectClusterScope " + cs.Name, spec: &cs.Spec.KollectScopeSpec, cluster: &cs.Spec})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// selects applies a namespaceSelector; an invalid selector selects every namespace, so a typo
// in a ceiling restricts too much rather than too little.
func selects(sel *metav1.LabelSelector, set labels.Set) bool {
	if sel == nil {
		return true
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return true
	}
	return s.Matches(set)
}
