// Package v1alpha1 holds the kollect.dev/v1alpha1 API: the custom resources through which a
// team declares what Kollect watches (KollectTarget, KollectClusterTarget), what it extracts
// (KollectProfile), how it aggregates and exports (KollectInventory, KollectClusterInventory),
// where rows go (KollectSnapshotSink, KollectDatabaseSink, KollectEventSink) and what a team
// may do (KollectScope, KollectClusterScope).
//
// The types carry every rule the API server can enforce itself (OpenAPI validation and CEL
// x-kubernetes-validations); checks that need code, such as compiling a CEL expression or
// evaluating a scope, are done by the agent's admission webhooks and controllers.
//
// +kubebuilder:object:generate=true
// +groupName=kollect.dev
package v1alpha1
