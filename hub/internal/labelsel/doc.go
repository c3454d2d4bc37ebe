// Package labelsel converts the protocol's cluster selectors to Kubernetes label selectors,
// stores them as canonical JSON and matches cluster labels against them, with Kubernetes
// semantics (an empty selector selects everything).
package labelsel
