// Package bundle validates bundle manifests before the hub stores them: multi-document YAML of
// kollect.dev objects only, each checked against its CRD's structural schema (unknown fields,
// defaults, OpenAPI validation and x-kubernetes-validations CEL rules) and with every CEL and
// JSONPath expression it carries for the agent compiled by the functions the agent compiles
// with (kollect.dev/expr). It also computes revision digests and unified diffs between
// revisions.
package bundle
