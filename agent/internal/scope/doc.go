// Package scope evaluates KollectScopes and KollectClusterScopes: which kinds a target may
// watch, which namespaces it may reach, which sinks an inventory may export to and how fast
// it may export.
//
// Semantics, in the order the agent applies them:
//
//   - A namespaced Kollect object (KollectTarget, KollectInventory) is governed by every
//     KollectScope of its namespace and by every KollectClusterScope whose namespaceSelector
//     matches the namespace (no selector matches every namespace). Cluster scopes act as a
//     ceiling: they can only take permissions away.
//   - A cluster-scoped Kollect object (KollectClusterTarget, KollectClusterInventory) is
//     governed by every KollectClusterScope, whatever its namespaceSelector.
//   - Scopes combine by intersection: a kind, namespace or sink is allowed only if every
//     governing scope allows it; minimum debounce and resync interval take the largest value.
//     The result does not depend on listing order: scopes are evaluated sorted by kind
//     (KollectClusterScope first) and name, and a denial names the first scope that denies.
//   - Inside a scope an empty allowlist denies its whole category.
//   - When no scope governs an object it is unrestricted, except in tenant mode. In tenant
//     mode a namespace needs at least one KollectScope of its own (a cluster scope alone is
//     a ceiling, not a grant), and cluster-scoped objects need at least one KollectClusterScope;
//     without one nothing is allowed (reason ScopeMissing).
//
// Evaluation is pure: Set holds the scopes, Rules the scopes that govern one object, and every
// check returns a Decision whose reason and message name the rule that decided.
package scope
