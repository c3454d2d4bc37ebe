package controller

import (
	"context"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/collector"
	"kollect.dev/agent/internal/scope"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// ScopeGate enforces KollectScopes at reconcile time, the backstop for objects admitted
// before a scope changed or while the webhook was unavailable. It also remembers which
// targets are currently not permitted so inventories leave their rows out.
//
// A nil *ScopeGate enforces nothing.
type ScopeGate struct {
	// Reader lists scopes (the manager's cache).
	Reader client.Reader
	// TenantMode denies everything in a namespace without a KollectScope.
	TenantMode bool
	// NamespaceLabels returns a namespace's labels for cluster scopes' namespaceSelector.
	NamespaceLabels func(string) (labels.Set, bool)
	// OnTargetPermission is called when a target becomes permitted or not, so inventories
	// that aggregate it are re-evaluated.
	OnTargetPermission func(collector.TargetKey)

	mu     sync.Mutex
	denied map[collector.TargetKey]scope.Decision
}

// Rules returns the rules governing Kollect objects of namespace ns ("" for cluster-scoped).
func (g *ScopeGate) Rules(ctx context.Context, ns string) (scope.Rules, error) {
	if g == nil {
		return scope.Rules{}, nil
	}
	var opts []client.ListOption
	if ns != "" {
		opts = append(opts, client.InNamespace(ns))
	}
	set, err := scope.Load(ctx, g.Reader, g.TenantMode, opts...)
	if err != nil {
		return scope.Rules{}, err
	}
	if ns == "" {
		return set.ForCluster(), nil
	}
	var nsLabels labels.Set
	if g.NamespaceLabels != nil {
		nsLabels, _ = g.NamespaceLabels(ns)
	}
	return set.ForNamespace(ns, nsLabels), nil
}

// setTarget records a target's decision and reports a change to OnTargetPermission.
func (g *ScopeGate) setTarget(key collector.TargetKey, d scope.Decision) {
	if g == nil {
		return
	}
	g.mu.Lock()
	if g.denied == nil {
		g.denied = map[collector.TargetKey]scope.Decision{}
	}
	prev, had := g.denied[key]
	if d.Allowed {
		delete(g.denied, key)
	} else {
		g.denied[key] = d
	}
	changed := had != !d.Allowed || (had && prev != d)
	g.mu.Unlock()
	if changed && g.OnTargetPermission != nil {
		g.OnTargetPermission(key)
	}
}

// forgetTarget drops a deleted target.
func (g *ScopeGate) forgetTarget(key collector.TargetKey) { g.setTarget(key, scope.Allow) }

// targetDenied returns the decision that keeps a target from contributing rows.
func (g *ScopeGate) targetDenied(key collector.TargetKey) (scope.Decision, bool) {
	if g == nil {
		return scope.Decision{}, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	d, ok := g.denied[key]
	return d, ok
}

// isScopeReason reports whether a condition reason comes from a scope decision.
func isScopeReason(reason string) bool { return strings.HasPrefix(reason, kollectv1.ReasonScopePrefix) }

// scopeNamespaces returns the namespaces a scope change affects: the scope's own, or every
// namespace ("" plus a wildcard flag) for a cluster scope.
func scopeNamespaces(o client.Object) (ns string, all bool) {
	if _, ok := o.(*kollectv1.KollectClusterScope); ok {
		return "", true
	}
	return o.GetNamespace(), false
}
