package collector

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/helmrelease/releasetest"
	"kollect.dev/agent/internal/profile"
	kollectv1 "kollect.dev/api/v1alpha1"
)

var (
	secretGVK = schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
	secretGVR = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
)

// TestPlainSecretProfileReadsOnlyOptedInNamespaces: a profile that reads Secrets as they are
// (no decode) selects only in namespaces labelled kollect.dev/secret-extraction=allow, even
// from a cluster target that selects every namespace: a Secret's value of another namespace is
// in no row, labelling that namespace brings its rows and unlabelling it removes them. A
// decoding profile on the same watch keeps reading Helm releases everywhere.
func TestPlainSecretProfileReadsOnlyOptedInNamespaces(t *testing.T) {
	ctx := context.Background()
	open, closed := "secrets-open", "secrets-closed"
	planted := fmt.Sprintf("planted-%d", time.Now().UnixNano())
	createNamespace(t, open, map[string]string{kollectv1.LabelSecretExtraction: kollectv1.SecretExtractionAllowed})
	createNamespace(t, closed, nil)
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Namespace: open, Name: "token"}, StringData: map[string]string{"token": "open-value"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: closed, Name: "token"}, StringData: map[string]string{"token": planted}},
		releasetest.Secret(t, closed),
	} {
		if err := cp.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}

	col := New(dynamic.NewForConfigOrDie(cp.Config), Options{NamespaceLabels: liveNamespaceLabels, Log: logr.Discard()})
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = col.Start(runCtx) }()

	plain := secretTarget(t, "plain", kollectv1.KollectProfileSpec{Target: kollectv1.GroupVersionKind{Version: "v1", Kind: "Secret"},
		Attributes: []kollectv1.Attribute{{Name: "token", JSONPath: "{.data.token}", Optional: true}}})
	releases := secretTarget(t, "releases", kollectv1.KollectProfileSpec{Target: kollectv1.GroupVersionKind{Version: "v1", Kind: "Secret"},
		Decode: kollectv1.DecodeHelmRelease, Attributes: []kollectv1.Attribute{{Name: "chart", JSONPath: "{.release.chart}"}}})
	if !plain.SecretsConfined() || releases.SecretsConfined() {
		t.Fatalf("confined: plain %v, releases %v; want true, false", plain.SecretsConfined(), releases.SecretsConfined())
	}
	col.SetTarget(plain)
	col.SetTarget(releases)

	noPlanted := func(rows []export.Row) {
		t.Helper()
		raw, err := json.Marshal(rows)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{planted, base64.StdEncoding.EncodeToString([]byte(planted))} {
			if strings.Contains(string(raw), v) {
				t.Fatalf("a Secret's value of unlabelled namespace %s is in the rows: %s", closed, raw)
			}
		}
	}
	rows := waitNamespaces(t, col, plain.Key, open)
	noPlanted(rows)
	if rows := waitNamespaces(t, col, releases.Key, closed); rows[0].Name != "demo" {
		t.Fatalf("the decoding target's row %s/%s, want the release demo", rows[0].Namespace, rows[0].Name)
	}

	// The admin opts the other namespace in: its Secrets (the release Secret too, as it is)
	// become rows of the plain target, with no change to them.
	setNamespaceLabels(t, closed, map[string]string{kollectv1.LabelSecretExtraction: kollectv1.SecretExtractionAllowed})
	col.NamespacesChanged()
	waitNamespaces(t, col, plain.Key, closed, closed, open)

	// And out again: its rows go.
	setNamespaceLabels(t, closed, map[string]string{kollectv1.LabelSecretExtraction: "deny"})
	col.NamespacesChanged()
	noPlanted(waitNamespaces(t, col, plain.Key, open))
	waitNamespaces(t, col, releases.Key, closed)
}

// TestSelectsConfinesPlainSecretProfiles: the one-shot selection (previews and the CLI) applies
// the same rule as the watches.
func TestSelectsConfinesPlainSecretProfiles(t *testing.T) {
	plain := secretTarget(t, "plain", kollectv1.KollectProfileSpec{Target: kollectv1.GroupVersionKind{Version: "v1", Kind: "Secret"},
		Attributes: []kollectv1.Attribute{{Name: "type", JSONPath: "{.type}"}}})
	nsLabels := func(ns string) (labels.Set, bool) {
		switch ns {
		case "open":
			return labels.Set{kollectv1.LabelSecretExtraction: kollectv1.SecretExtractionAllowed}, true
		case "closed":
			return labels.Set{"team": "a"}, true
		}
		return nil, false
	}
	for ns, want := range map[string]bool{"open": true, "closed": false, "unknown": false} {
		obj := &unstructured.Unstructured{}
		obj.SetAPIVersion("v1")
		obj.SetKind("Secret")
		obj.SetNamespace(ns)
		obj.SetName("s")
		if got := plain.Selects(obj, nsLabels); got != want {
			t.Errorf("a Secret in namespace %s selected: %v, want %v", ns, got, want)
		}
	}
}

func createNamespace(t *testing.T, name string, l map[string]string) {
	t.Helper()
	if err := cp.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}); err != nil {
		t.Fatal(err)
	}
}

func setNamespaceLabels(t *testing.T, name string, l map[string]string) {
	t.Helper()
	ns := &corev1.Namespace{}
	if err := cp.Client.Get(context.Background(), client.ObjectKey{Name: name}, ns); err != nil {
		t.Fatal(err)
	}
	ns.Labels = l
	if err := cp.Client.Update(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
}

// liveNamespaceLabels reads a namespace's labels from the API server, where the agent reads
// them from its cache.
func liveNamespaceLabels(name string) (labels.Set, bool) {
	ns := &corev1.Namespace{}
	if err := cp.Client.Get(context.Background(), client.ObjectKey{Name: name}, ns); err != nil {
		return nil, false
	}
	return ns.Labels, true
}

// secretTarget is a cluster target of every namespace with a profile on Secrets.
func secretTarget(t *testing.T, name string, spec kollectv1.KollectProfileSpec) *Target {
	t.Helper()
	prof, err := profile.Compile(&kollectv1.KollectProfile{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	tgt, err := NewTarget(TargetKey{Name: name}, kollectv1.TargetSelection{}, secretGVK, secretGVR, true, ProfileRef{Key: name + "@1"}, prof)
	if err != nil {
		t.Fatal(err)
	}
	return tgt
}

// waitNamespaces waits until the target's rows come from exactly these namespaces (sorted,
// one entry a row) among the test's namespaces, and returns those rows.
func waitNamespaces(t *testing.T, c *Collector, key TargetKey, want ...string) []export.Row {
	t.Helper()
	var got []string
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		st, err := c.Collect(key)
		if err == nil && st.Synced {
			var rows []export.Row
			got = got[:0]
			for _, r := range st.Rows {
				if strings.HasPrefix(r.Namespace, "secrets-") {
					rows = append(rows, r)
					got = append(got, r.Namespace)
				}
			}
			slices.Sort(got)
			if slices.Equal(got, want) {
				return rows
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("target %s: rows from %v, want %v", key, got, want)
	return nil
}
