// Package schema validates Kollect objects offline against the CRDs embedded in
// kollect.dev/api/crds the way the API server does: unknown fields, defaults, the OpenAPI
// schema and the CEL x-kubernetes-validations rules.
package schema
