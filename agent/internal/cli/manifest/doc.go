// Package manifest reads Kubernetes objects from YAML and JSON files (several documents per
// file, `kind: List` expanded) and remembers where each object and each of its fields starts,
// so the CLI can print file:line next to a finding.
package manifest
