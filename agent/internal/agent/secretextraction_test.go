package agent

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/helmrelease/releasetest"
	"kollect.dev/agent/internal/sink"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// TestProfileOnSecretsReadsOnlyOptedInNamespaces is issue 41 item 7: with read access to every
// Secret (the chart's rbac.helmReleases), a tenant's profile on Secrets that does not decode
// them exports only the Secrets of namespaces the cluster admin labelled
// kollect.dev/secret-extraction=allow, and its target says so (SecretsConfined) while Ready. A
// Secret's value of an unlabelled namespace reaches no sink; labelling the namespace exports
// its rows, unlabelling it withdraws them. A decode: HelmRelease profile on the same watch
// still reads the release in the unlabelled namespace, and is not confined.
func TestProfileOnSecretsReadsOnlyOptedInNamespaces(t *testing.T) {
	ctx := context.Background()
	open, closed := "secext-open", "secext-closed"
	planted := fmt.Sprintf("planted-%d", time.Now().UnixNano())
	create(t,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: open,
			Labels: map[string]string{kollectv1.LabelSecretExtraction: kollectv1.SecretExtractionAllowed}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: closed}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: open, Name: "token"}, StringData: map[string]string{"token": "open-value"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: closed, Name: "token"}, StringData: map[string]string{"token": planted}},
		releasetest.Secret(t, closed))
	setScope(t, open, func(s *kollectv1.KollectScopeSpec) {
		s.AllowedKinds = []kollectv1.GroupKindRule{{Kind: "Secret"}}
		s.AllowedNamespaces = []string{open, closed}
		s.AllowedSinks = []kollectv1.SinkRule{{Family: "*"}}
	})
	both := &kollectv1.NamespaceSelection{Include: []string{open, closed}}
	secretKind := kollectv1.GroupVersionKind{Version: "v1", Kind: "Secret"}
	create(t,
		&kollectv1.KollectProfile{ObjectMeta: metav1.ObjectMeta{Namespace: open, Name: "tokens"}, Spec: kollectv1.KollectProfileSpec{
			Target: secretKind, Attributes: []kollectv1.Attribute{{Name: "token", JSONPath: "{.data.token}", Optional: true}}}},
		&kollectv1.KollectProfile{ObjectMeta: metav1.ObjectMeta{Namespace: open, Name: "releases"}, Spec: kollectv1.KollectProfileSpec{
			Target: secretKind, Decode: kollectv1.DecodeHelmRelease, Attributes: []kollectv1.Attribute{{Name: "chart", JSONPath: "{.release.chart}"}}}},
		&kollectv1.KollectTarget{ObjectMeta: metav1.ObjectMeta{Namespace: open, Name: "tokens"}, Spec: kollectv1.KollectTargetSpec{
			ProfileRef: kollectv1.LocalObjectReference{Name: "tokens"}, TargetSelection: kollectv1.TargetSelection{Namespaces: both}}},
		&kollectv1.KollectTarget{ObjectMeta: metav1.ObjectMeta{Namespace: open, Name: "releases"}, Spec: kollectv1.KollectTargetSpec{
			ProfileRef: kollectv1.LocalObjectReference{Name: "releases"}, TargetSelection: kollectv1.TargetSelection{Namespaces: both}}},
		recordingSink(open), inventoryFor(open, "inv", []string{"tokens", "releases"}, 200*time.Millisecond))

	recs := &recorders{}
	startAgentWith(t, nil, "c1", "", recs.factories())
	rec := recs.get(open + "/rec")
	rowsFrom := func(b []*sink.Batch, target string) string {
		if len(b) == 0 {
			return ""
		}
		var ns []string
		for _, r := range b[len(b)-1].Envelope.Rows {
			if r.Target == open+"/"+target {
				ns = append(ns, r.Namespace)
			}
		}
		slices.Sort(ns)
		return strings.Join(slices.Compact(ns), ",")
	}
	exported := func(tokens, releases string) func([]*sink.Batch) bool {
		return func(b []*sink.Batch) bool {
			return rowsFrom(b, "tokens") == tokens && rowsFrom(b, "releases") == releases
		}
	}
	noPlanted := func() {
		t.Helper()
		raw, err := json.Marshal(rec.Batches())
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{planted, base64.StdEncoding.EncodeToString([]byte(planted))} {
			if strings.Contains(string(raw), v) {
				t.Fatalf("a Secret's value of unlabelled namespace %s reached the sink", closed)
			}
		}
	}
	if !rec.WaitFor(30*time.Second, exported(open, closed)) {
		t.Fatalf("tokens from %q, releases from %q; want %s and %s", rowsFrom(rec.Batches(), "tokens"), rowsFrom(rec.Batches(), "releases"), open, closed)
	}
	noPlanted()

	// The note is on the confined target only, which is Ready all the same.
	tokens := &kollectv1.KollectTarget{ObjectMeta: metav1.ObjectMeta{Namespace: open, Name: "tokens"}}
	scopeCondition(t, tokens, func() []metav1.Condition { return tokens.Status.Conditions }, kollectv1.ConditionSecretsConfined,
		metav1.ConditionTrue, kollectv1.ReasonSecretExtractionOptIn, "kollect.dev/secret-extraction=allow")
	scopeCondition(t, tokens, func() []metav1.Condition { return tokens.Status.Conditions }, kollectv1.ConditionReady,
		metav1.ConditionTrue, kollectv1.ReasonWatching)
	releases := &kollectv1.KollectTarget{ObjectMeta: metav1.ObjectMeta{Namespace: open, Name: "releases"}}
	scopeCondition(t, releases, func() []metav1.Condition { return releases.Status.Conditions }, kollectv1.ConditionReady,
		metav1.ConditionTrue, kollectv1.ReasonWatching)
	if c := apimeta.FindStatusCondition(releases.Status.Conditions, kollectv1.ConditionSecretsConfined); c != nil {
		t.Fatalf("a decoding target is not confined: %+v", c)
	}

	// The cluster admin opts the other namespace in, and out again.
	relabel := func(value string) {
		t.Helper()
		ns := &corev1.Namespace{}
		if err := cp.Client.Get(ctx, client.ObjectKey{Name: closed}, ns); err != nil {
			t.Fatal(err)
		}
		ns.Labels = map[string]string{kollectv1.LabelSecretExtraction: value}
		if err := cp.Client.Update(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	relabel(kollectv1.SecretExtractionAllowed)
	if !rec.WaitFor(30*time.Second, exported(closed+","+open, closed)) {
		t.Fatalf("after labelling %s: tokens from %q", closed, rowsFrom(rec.Batches(), "tokens"))
	}
	relabel("deny")
	if !rec.WaitFor(30*time.Second, exported(open, closed)) {
		t.Fatalf("after unlabelling %s: tokens from %q", closed, rowsFrom(rec.Batches(), "tokens"))
	}
	last := rec.Last()
	raw, err := json.Marshal(last.Envelope.Rows)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), base64.StdEncoding.EncodeToString([]byte(planted))) {
		t.Fatalf("the export after unlabelling %s still holds its Secret's value", closed)
	}
}
