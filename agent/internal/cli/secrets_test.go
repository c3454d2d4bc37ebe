package cli

import (
	"strings"
	"testing"
)

// secretsConfig is a profile on Secrets that does not decode them, a cluster target of every
// namespace, two Secrets, and one Namespace opted in to Secret extraction.
const secretsConfig = `apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: tokens, namespace: ops}
spec:
  target: {version: v1, kind: Secret}
  attributes: [{name: token, jsonPath: "{.data.token}"}]
---
apiVersion: kollect.dev/v1alpha1
kind: KollectClusterTarget
metadata: {name: tokens}
spec:
  profileRef: {name: tokens, namespace: ops}
---
apiVersion: v1
kind: Namespace
metadata:
  name: open
  labels: {kollect.dev/secret-extraction: allow}
---
apiVersion: v1
kind: Namespace
metadata: {name: closed}
---
apiVersion: v1
kind: Secret
metadata: {name: token, namespace: open}
data: {token: b3Blbi12YWx1ZQ==}
---
apiVersion: v1
kind: Secret
metadata: {name: token, namespace: closed}
data: {token: cGxhbnRlZC12YWx1ZQ==}
`

// TestRenderReadsSecretsOnlyInOptedInNamespaces: render shows what the agent would export, so
// a profile reading Secrets as they are renders only those of namespaces labelled
// kollect.dev/secret-extraction=allow, and says so on standard error.
func TestRenderReadsSecretsOnlyInOptedInNamespaces(t *testing.T) {
	out, errOut, code := run(t, secretsConfig, "render", "-", "-o", "ndjson")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if strings.Count(out, "\n") != 1 || !strings.Contains(out, `"namespace":"open"`) || strings.Contains(out, "cGxhbnRlZC12YWx1ZQ==") {
		t.Fatalf("want the Secret of namespace open alone:\n%s", out)
	}
	if !strings.Contains(errOut, "note: target tokens reads Secrets only in namespaces labelled kollect.dev/secret-extraction=allow") {
		t.Fatalf("no note on standard error: %q", errOut)
	}
}
