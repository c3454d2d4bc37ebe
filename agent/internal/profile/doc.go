// Package profile compiles a KollectProfile's attributes into extractors, once per profile
// generation, and runs them against objects: JSONPath templates (client-go's parser; simple
// field paths run on a zero-copy walker, the rest through client-go's evaluator) and CEL
// expressions (cel-go with the Kubernetes CEL libraries and the strings extension, under a
// cost budget). Results are coerced to the attribute's declared type with clear errors. It
// also compiles and runs target match expressions.
//
// The environment itself — the CEL declarations and libraries, the cost budget, the
// JSONPath dialect — is kollect.dev/expr, which the hub validates bundles with too, so an
// expression the hub accepts is one this package compiles.
package profile
