package preview

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/prototext"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kollectv1 "kollect.dev/api/v1alpha1"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// TestPreviewReadsSecretsOnlyInOptedInNamespaces: a preview runs with the agent's credentials,
// so a hub operator's profile on Secrets (no decode) is held to the same rule as the agent's
// watches: only Secrets of namespaces labelled kollect.dev/secret-extraction=allow are
// counted, and a Secret's value of another namespace is in no part of the answer, samples
// included.
func TestPreviewReadsSecretsOnlyInOptedInNamespaces(t *testing.T) {
	ctx := t.Context()
	open, closed := "preview-secrets-open", "preview-secrets-closed"
	planted := fmt.Sprintf("planted-%d", time.Now().UnixNano())
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: open, Labels: map[string]string{kollectv1.LabelSecretExtraction: kollectv1.SecretExtractionAllowed}}},
		{ObjectMeta: metav1.ObjectMeta{Name: closed}},
	} {
		if err := cp.Client.Create(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	for ns, v := range map[string]string{open: "open-value", closed: planted} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "token"}, StringData: map[string]string{"token": v}}
		if err := cp.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	manifests := fmt.Sprintf(`apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: tokens}
spec:
  target: {version: v1, kind: Secret}
  attributes: [{name: token, jsonPath: "{.data.token}"}]
---
apiVersion: kollect.dev/v1alpha1
kind: KollectTarget
metadata: {name: tokens}
spec:
  profileRef: {name: tokens}
  namespaces: {include: [%s, %s]}
`, open, closed)
	env := envFor(t, cp.Config) // may read every Secret, as with the chart's rbac.helmReleases
	env.Samples = true
	res := Evaluate(ctx, &fleetv1.PreviewRequest{Id: "secrets", Manifests: manifests, MaxSamples: MaxSamples}, env)
	if res.GetError() != "" {
		t.Fatalf("error: %s", res.GetError())
	}
	tokens := targetOf(t, res, "kollect/tokens")
	if tokens.GetObjectsMatched() != 1 || tokens.GetRows() != 1 || len(tokens.GetSamples()) != 1 ||
		tokens.GetSamples()[0].GetObject() != open+"/token" {
		t.Fatalf("tokens: matched %d, rows %d, samples %v; want the Secret of %s alone",
			tokens.GetObjectsMatched(), tokens.GetRows(), tokens.GetSamples(), open)
	}
	answer := prototext.Format(res)
	for _, v := range []string{planted, base64.StdEncoding.EncodeToString([]byte(planted)), closed + "/token"} {
		if strings.Contains(answer, v) {
			t.Fatalf("the answer names or quotes the Secret of unlabelled namespace %s: %s", closed, answer)
		}
	}
}
