// Package crds embeds the CustomResourceDefinitions generated from kollect.dev/api/v1alpha1,
// so tests, the agent and the charts install exactly what the Go types declare.
package crds

import "embed"

// FS holds one kollect.dev_<plural>.yaml file per kind.
//
//go:embed *.yaml
var FS embed.FS
