package scope

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// ProfileForClusterTarget decides whether a KollectClusterTarget may use the profile named
// profile, of the namespace these rules govern. Not when a KollectScope governs that namespace:
// it is a tenant's, and a tenant who edits the profile would choose what the cluster target
// extracts from every namespace. Cluster scopes alone (a platform's ceilings) do not make a
// namespace a tenant's.
func (r Rules) ProfileForClusterTarget(profile string) Decision {
	for _, ru := range r.rules {
		if ru.cluster == nil {
			return deny(kollectv1.ReasonScopeProfileDenied, "KollectProfile %s is in a tenant's namespace (%s governs it): "+
				"a KollectClusterTarget may use only profiles of namespaces no KollectScope governs", profile, ru.name)
		}
	}
	return Allow
}

// Kind decides whether a target may watch objects of gk.
func (r Rules) Kind(gk schema.GroupKind) Decision {
	if r.missing != "" {
		return deny(kollectv1.ReasonScopeMissing, "%s", r.missing)
	}
	for _, ru := range r.rules {
		if !kindAllowed(ru.spec.AllowedKinds, gk) {
			return deny(kollectv1.ReasonScopeKindDenied, "%s does not allow %s", ru.name, groupKind(gk))
		}
	}
	return Allow
}

func groupKind(gk schema.GroupKind) string {
	if gk.Group == "" {
		return "core/" + gk.Kind
	}
	return gk.Group + "/" + gk.Kind
}

func kindAllowed(allowed []kollectv1.GroupKindRule, gk schema.GroupKind) bool {
	for _, a := range allowed {
		if (a.Group == "*" || a.Group == gk.Group) && (a.Kind == "*" || a.Kind == gk.Kind) {
			return true
		}
	}
	return false
}

// Reach is the set of namespaces a target may collect from: every namespace (All) or those
// matching Patterns.
type Reach struct {
	All      bool
	Patterns []string
	// Own is the namespace of a KollectTarget, "" for a KollectClusterTarget: without a scope
	// that grants more, a KollectTarget reaches only Own.
	Own string
}

func (r Reach) String() string {
	if r.All {
		return "every namespace"
	}
	return "namespaces " + strings.Join(r.Patterns, ", ")
}

// TargetReach computes what a target selection may reach. ownNamespace is the namespace of
// a KollectTarget ("" for a KollectClusterTarget). Excludes and label selectors only narrow
// the set, so they are ignored: a reach is judged by the widest set the target could select.
func TargetReach(ownNamespace string, sel kollectv1.TargetSelection) Reach {
	if sel.Namespaces != nil && len(sel.Namespaces.Include) > 0 {
		return Reach{Patterns: sel.Namespaces.Include, Own: ownNamespace}
	}
	if ownNamespace != "" && (sel.Namespaces == nil || sel.Namespaces.Selector == nil) {
		return Reach{Patterns: []string{ownNamespace}, Own: ownNamespace}
	}
	return Reach{All: true, Own: ownNamespace}
}

// confined reports whether reach stays inside the target's own namespace.
func (r Reach) confined() bool {
	return r.Own != "" && !r.All && len(r.Patterns) > 0 && !slices.ContainsFunc(r.Patterns, func(p string) bool { return p != r.Own })
}

// Namespaces decides whether a target may reach the namespaces of reach. Targets of
// cluster-scoped kinds reach no namespace and pass.
func (r Rules) Namespaces(reach Reach) Decision {
	if r.missing != "" {
		return deny(kollectv1.ReasonScopeMissing, "%s", r.missing)
	}
	if len(r.rules) == 0 && reach.Own != "" && !reach.confined() {
		// No scope grants more: a namespaced target is its author's view of their own
		// namespace; collecting across namespaces is what the cluster-scoped kinds are for.
		return deny(kollectv1.ReasonScopeNamespaceDenied,
			"a KollectTarget collects only from its own namespace %s unless a KollectScope or KollectClusterScope allows more, and none governs it (it reaches %s); use a KollectClusterTarget for cross-namespace collection",
			reach.Own, reach)
	}
	for _, ru := range r.rules {
		allowed := ru.spec.AllowedNamespaces
		if reach.All {
			if !contains(allowed, "*") {
				return deny(kollectv1.ReasonScopeNamespaceDenied, "%s does not allow every namespace (allowed: %s); list the namespaces in namespaces.include",
					ru.name, listOrNone(allowed))
			}
			continue
		}
		for _, p := range reach.Patterns {
			if !covered(allowed, p) {
				return deny(kollectv1.ReasonScopeNamespaceDenied, "%s does not allow namespace %s (allowed: %s)", ru.name, p, listOrNone(allowed))
			}
		}
	}
	return Allow
}

// covered reports whether every namespace pattern p can match is matched by one of allowed.
// Plain names are matched as globs; a glob is covered by "*", by itself, or by a prefix glob
// ("team-*" covers "team-a-*").
func covered(allowed []string, p string) bool {
	glob := strings.ContainsAny(p, `*?[\`)
	for _, a := range allowed {
		switch {
		case a == "*" || a == p:
			return true
		case !glob:
			if ok, _ := path.Match(a, p); ok {
				return true
			}
		case strings.HasSuffix(a, "*") && !strings.ContainsAny(a[:len(a)-1], `*?[\`) && strings.HasPrefix(p, a[:len(a)-1]):
			return true
		}
	}
	return false
}

// SinkRef names a sink of an inventory; Namespace matters for cluster inventories only.
type SinkRef struct {
	Family          kollectv1.SinkFamily
	Namespace, Name string
}

func (s SinkRef) String() string {
	if s.Namespace == "" {
		return string(s.Family) + " sink " + s.Name
	}
	return string(s.Family) + " sink " + s.Namespace + "/" + s.Name
}

// Sink decides whether an inventory may export to s. Name patterns are globs over the sink's
// name; a pattern with a slash matches namespace/name (useful in cluster scopes).
func (r Rules) Sink(s SinkRef) Decision {
	if r.missing != "" {
		return deny(kollectv1.ReasonScopeMissing, "%s", r.missing)
	}
	for _, ru := range r.rules {
		if !sinkAllowed(ru.spec.AllowedSinks, s) {
			return deny(kollectv1.ReasonScopeSinkDenied, "%s does not allow %s", ru.name, s)
		}
	}
	return Allow
}

func sinkAllowed(rules []kollectv1.SinkRule, s SinkRef) bool {
	for _, sr := range rules {
		if sr.Family != "*" && sr.Family != string(s.Family) {
			continue
		}
		if len(sr.Names) == 0 {
			return true
		}
		for _, n := range sr.Names {
			subject := s.Name
			if strings.Contains(n, "/") {
				subject = s.Namespace + "/" + s.Name
			}
			if ok, _ := path.Match(n, subject); ok {
				return true
			}
		}
	}
	return false
}

// Cadence decides whether an inventory's timing respects the minimums: the debounce (zero
// means exporting right after every change), the maxDelay (which paces exports under constant
// churn, so it may not undercut the minimum debounce either) and, when set, the resync
// interval. Minimums combine by taking the largest; the message names the scope that sets it.
func (r Rules) Cadence(t kollectv1.ExportTiming) Decision {
	if r.missing != "" {
		return deny(kollectv1.ReasonScopeMissing, "%s", r.missing)
	}
	var minDebounce, minResync time.Duration
	var debounceBy, resyncBy string
	for _, ru := range r.rules {
		if d := ru.spec.MinDebounce; d != nil && d.Duration > minDebounce {
			minDebounce, debounceBy = d.Duration, ru.name
		}
		if d := ru.spec.MinResyncInterval; d != nil && d.Duration > minResync {
			minResync, resyncBy = d.Duration, ru.name
		}
	}
	if t.Debounce.Duration < minDebounce {
		return deny(kollectv1.ReasonScopeCadenceTooFast, "debounce %s is below the minimum %s of %s", t.Debounce.Duration, minDebounce, debounceBy)
	}
	if t.MaxDelay.Duration > 0 && t.MaxDelay.Duration < minDebounce {
		return deny(kollectv1.ReasonScopeCadenceTooFast, "maxDelay %s is below the minimum debounce %s of %s", t.MaxDelay.Duration, minDebounce, debounceBy)
	}
	if t.ResyncInterval != nil && t.ResyncInterval.Duration < minResync {
		return deny(kollectv1.ReasonScopeCadenceTooFast, "resyncInterval %s is below the minimum %s of %s", t.ResyncInterval.Duration, minResync, resyncBy)
	}
	return Allow
}

// Target checks what a target watches: its kind and, for namespaced kinds, its reach.
func (r Rules) Target(gk schema.GroupKind, namespaced bool, reach Reach) Decision {
	if d := r.Kind(gk); !d.Allowed {
		return d
	}
	if namespaced {
		return r.Namespaces(reach)
	}
	return Allow
}

// Inventory checks where and how fast an inventory exports; sinks are checked in order.
func (r Rules) Inventory(sinks []SinkRef, t kollectv1.ExportTiming) Decision {
	for _, s := range sinks {
		if d := r.Sink(s); !d.Allowed {
			return d
		}
	}
	return r.Cadence(t)
}

// InventorySinks lists the sink references of a KollectInventory.
func InventorySinks(s kollectv1.SinkReferences) []SinkRef {
	var out []SinkRef
	add := func(f kollectv1.SinkFamily, refs []kollectv1.LocalObjectReference) {
		for _, r := range refs {
			out = append(out, SinkRef{Family: f, Name: r.Name})
		}
	}
	add(kollectv1.SinkFamilySnapshot, s.Snapshot)
	add(kollectv1.SinkFamilyDatabase, s.Database)
	add(kollectv1.SinkFamilyEvent, s.Event)
	return out
}

// ClusterInventorySinks lists the sink references of a KollectClusterInventory.
func ClusterInventorySinks(s kollectv1.ClusterSinkReferences) []SinkRef {
	var out []SinkRef
	add := func(f kollectv1.SinkFamily, refs []kollectv1.NamespacedObjectReference) {
		for _, r := range refs {
			out = append(out, SinkRef{Family: f, Namespace: r.Namespace, Name: r.Name})
		}
	}
	add(kollectv1.SinkFamilySnapshot, s.Snapshot)
	add(kollectv1.SinkFamilyDatabase, s.Database)
	add(kollectv1.SinkFamilyEvent, s.Event)
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return fmt.Sprint(strings.Join(l, ", "))
}

// Minimums returns the largest minimum debounce and resync interval of the governing scopes,
// so a reconciler can hold an admitted-but-now-too-fast inventory to the current floor.
func (r Rules) Minimums() (debounce, resync time.Duration) {
	for _, ru := range r.rules {
		if d := ru.spec.MinDebounce; d != nil && d.Duration > debounce {
			debounce = d.Duration
		}
		if d := ru.spec.MinResyncInterval; d != nil && d.Duration > resync {
			resync = d.Duration
		}
	}
	return debounce, resync
}
