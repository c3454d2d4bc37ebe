// Package grant writes the KollectClusterScope the e2e tests need to use the test servers that
// serve no TLS: a PostgreSQL sink with sslMode disable needs allowInsecureSkipVerify from a
// cluster scope selecting its namespace.
package grant

import (
	"fmt"
	"strings"
)

// Unverified is a KollectClusterScope named name that lets the sinks of namespaces connect
// without verifying their server. It allows every kind, namespace and sink, so the namespaces
// stay as free as they were: their own KollectScopes, if any, decide the rest.
func Unverified(name string, namespaces ...string) string {
	return fmt.Sprintf(`apiVersion: kollect.dev/v1alpha1
kind: KollectClusterScope
metadata: {name: %s}
spec:
  namespaceSelector: {matchExpressions: [{key: kubernetes.io/metadata.name, operator: In, values: [%s]}]}
  allowedKinds: [{group: "*", kind: "*"}]
  allowedNamespaces: ["*"]
  allowedSinks: [{family: "*"}]
  allowInsecureSkipVerify: true
`, name, strings.Join(namespaces, ", "))
}
