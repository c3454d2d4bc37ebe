// Package profile compiles a KollectProfile's attributes into extractors, once per profile
// generation, and runs them against objects: JSONPath templates (client-go's parser; simple
// field paths run on a zero-copy walker, the rest through client-go's evaluator) and CEL
// expressions (cel-go with the Kubernetes CEL libraries and the strings extension, under a
// cost budget). Results are coerced to the attribute's declared type with clear errors.
package profile
