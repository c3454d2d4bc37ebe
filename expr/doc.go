// Package expr is the one expression environment of Kollect: the CEL environment (the variable
// `object`, the Kubernetes CEL libraries and the cel-go strings extension), its cost budget,
// and the JSONPath dialect (kubectl templates, with or without braces). The agent compiles
// profile attributes and target matches with it; the hub checks the expressions of a bundle
// with the very same functions before it stores the bundle. An expression the hub accepts is
// therefore exactly one the agent compiles, by construction rather than by keeping two copies
// in step (they had drifted: only the hub checked that a match returns a boolean).
//
// Why a module of its own (kollect.dev/expr) and not a package of kollect.dev/api: the api
// module holds the CRD Go types and is imported by users' code (controllers, tools that read
// or write Kollect objects), and today it needs nothing but k8s.io/apimachinery. This package
// needs cel-go, k8s.io/apiserver (for its CEL libraries) and k8s.io/client-go (for JSONPath),
// a large dependency graph no user of the API types should inherit. Agent and hub already
// depend on all three, so a small module beside api costs them nothing. It imports no other
// Kollect module and knows nothing of the CRDs: callers pass it expression strings.
package expr
