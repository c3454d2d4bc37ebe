package hubclient

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/hubclient/manifests"
	kollectv1 "kollect.dev/api/v1alpha1"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/testenv"
)

const adminObjects = `apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: platform, namespace: kollect}
spec:
  target: {version: v1, kind: ConfigMap}
  attributes:
    - {name: owner, jsonPath: "{.metadata.labels.owner}", optional: true}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectClusterScope
metadata: {name: platform}
spec:
  allowedNamespaces: [kollect]
`

// The bundle names the admin's objects (with wider settings) beside one of its own.
const takeoverBundle = `apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: platform, namespace: kollect}
spec:
  target: {version: v1, kind: Secret}
  attributes:
    - {name: data, jsonPath: "{.data}"}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectClusterScope
metadata: {name: platform}
spec:
  allowedNamespaces: ["*"]
  allowAmbientCredentials: true
  allowInsecureSkipVerify: true
---
apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: fresh, namespace: kollect}
spec:
  target: {version: v1, kind: ConfigMap}
  attributes:
    - {name: color, jsonPath: "{.data.color}", optional: true}
`

// TestApplierNeverTakesOverWhatItDidNotCreate: a bundle naming the cluster admin's profile
// and cluster scope gets both refused, by reason, and leaves them as they were (content,
// labels, field managers); pruning never deletes them; the bundle's own object is applied,
// and stays the hub's after its managed-by label is removed locally (the hub's field manager
// still owns it). With --hub-allow-scopes a new scope is applied, the admin's still refused.
func TestApplierNeverTakesOverWhatItDidNotCreate(t *testing.T) {
	cp, err := testenv.Start("hubclient-takeover", testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	ctx := t.Context()
	if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kollect"}}); err != nil {
		t.Fatal(err)
	}
	objs, err := decodeAll(adminObjects)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range objs {
		if err := cp.Client.Create(ctx, u, client.FieldOwner("cluster-admin")); err != nil {
			t.Fatal(err)
		}
	}
	before := liveSpecs(t, cp.Client, objs)

	o := Options{Cluster: "east", AllowedNamespaces: []string{"kollect"}, DefaultNamespace: "kollect", Log: logr.Discard()}
	a := NewApplier(cp.Client, o)
	cfg := func(rev int64, manifests string) *fleetv1.WatchConfigResponse {
		return &fleetv1.WatchConfigResponse{ConfigDigest: "d", Bundles: []*fleetv1.BundleAssignment{
			{Bundle: "ops", Revision: rev, Digest: "d", Manifests: manifests}}}
	}
	if err := a.Apply(ctx, cfg(1, takeoverBundle)); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"KollectProfile kollect/platform": "REFUSED KollectProfile kollect/platform exists and was not created by the hub",
		"KollectClusterScope /platform":   "REFUSED KollectClusterScope is the cluster admin's",
		"KollectProfile kollect/fresh":    "APPLIED",
	}
	checkResults(t, a, want)
	if after := liveSpecs(t, cp.Client, objs); !maps.Equal(before, after) {
		t.Fatalf("the admin's objects changed:\nbefore %v\nafter  %v", before, after)
	}

	// The hub's own object, its managed-by label removed by someone on the cluster, is
	// still recognised as the hub's: the next apply updates it, not refuses it.
	fresh := &unstructured.Unstructured{}
	fresh.SetGroupVersionKind(kollectv1.GroupVersion.WithKind("KollectProfile"))
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "kollect", Name: "fresh"}, fresh); err != nil {
		t.Fatal(err)
	}
	labels := fresh.GetLabels()
	delete(labels, LabelManagedBy)
	fresh.SetLabels(labels)
	if err := cp.Client.Update(ctx, fresh, client.FieldOwner("someone")); err != nil {
		t.Fatal(err)
	}
	if err := a.Apply(ctx, cfg(2, takeoverBundle)); err != nil {
		t.Fatal(err)
	}
	checkResults(t, a, want)

	// Pruning (an empty bundle) deletes the hub's object and never the admin's.
	if err := a.Apply(ctx, cfg(3, "")); err != nil {
		t.Fatal(err)
	}
	if after := liveSpecs(t, cp.Client, objs); !maps.Equal(before, after) {
		t.Fatalf("pruning changed the admin's objects:\nbefore %v\nafter  %v", before, after)
	}

	// The owner allows scopes: a new one is applied; the admin's is still not taken.
	o.AllowScopes = true
	a = NewApplier(cp.Client, o)
	if err := a.Apply(ctx, cfg(4, takeoverBundle+`---
apiVersion: kollect.dev/v1alpha1
kind: KollectClusterScope
metadata: {name: from-hub}
spec:
  allowedNamespaces: [kollect]
`)); err != nil {
		t.Fatal(err)
	}
	checkResults(t, a, map[string]string{
		"KollectProfile kollect/platform": "REFUSED KollectProfile kollect/platform exists and was not created by the hub",
		"KollectClusterScope /platform":   "REFUSED KollectClusterScope platform exists and was not created by the hub",
		"KollectProfile kollect/fresh":    "APPLIED",
		"KollectClusterScope /from-hub":   "APPLIED",
	})
	if after := liveSpecs(t, cp.Client, objs); !maps.Equal(before, after) {
		t.Fatalf("the admin's objects changed with scopes allowed:\nbefore %v\nafter  %v", before, after)
	}
}

func decodeAll(docs string) ([]*unstructured.Unstructured, error) {
	return manifests.Decode(docs)
}

// liveSpecs is each object's spec, labels and field managers as the API server holds them.
func liveSpecs(t *testing.T, c client.Client, objs []*unstructured.Unstructured) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, u := range objs {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(u.GroupVersionKind())
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(u), live); err != nil {
			t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
		}
		var managers []string
		for _, mf := range live.GetManagedFields() {
			managers = append(managers, mf.Manager)
		}
		out[u.GetKind()+"/"+u.GetName()] = strings.Join([]string{
			fmt.Sprint(live.Object["spec"]), fmt.Sprint(live.GetLabels()), strings.Join(managers, ","), live.GetResourceVersion()}, " | ")
	}
	return out
}

func checkResults(t *testing.T, a *Applier, want map[string]string) {
	t.Helper()
	bundles, _, _ := a.Snapshot()
	got := map[string]string{}
	for _, b := range bundles {
		for _, o := range b.GetObjects() {
			r := o.GetObject()
			got[r.GetKind()+" "+r.GetNamespace()+"/"+r.GetName()] = strings.TrimPrefix(o.GetResult().String(), "APPLY_RESULT_") + " " + o.GetMessage()
		}
	}
	for k, w := range want {
		if !strings.HasPrefix(got[k], w) {
			t.Errorf("%s: %q, want %q…", k, got[k], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("results %v, want %d", got, len(want))
	}
}
