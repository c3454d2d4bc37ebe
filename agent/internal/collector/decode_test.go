package collector

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"

	"kollect.dev/agent/internal/helmrelease"
	"kollect.dev/agent/internal/helmrelease/releasetest"
	"kollect.dev/agent/internal/profile"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// TestHelmReleaseTarget: a decoding profile's target selects the release Secret helm wrote
// (the helmrelease fixture) and not an Opaque Secret beside it, its row is named by the release
// with the release's UID, and an agent that may not read Secrets reports the target forbidden.
func TestHelmReleaseTarget(t *testing.T) {
	ctx := context.Background()
	secret := releasetest.Secret(t, "")
	ns := secret.Namespace
	if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*corev1.Secret{secret, {ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "opaque"}, StringData: map[string]string{"k": "v"}}} {
		if err := cp.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	prof, err := profile.Compile(&kollectv1.KollectProfile{Spec: kollectv1.KollectProfileSpec{
		Target: kollectv1.GroupVersionKind{Version: "v1", Kind: "Secret"}, Decode: kollectv1.DecodeHelmRelease,
		Attributes: []kollectv1.Attribute{{Name: "chart", JSONPath: "{.release.chart}"}, {Name: "revision", JSONPath: "{.release.revision}", Type: "int"}}}})
	if err != nil {
		t.Fatal(err)
	}
	gvk := schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	key := TargetKey{Namespace: ns, Name: "releases"}
	tgt, err := NewTarget(key, kollectv1.TargetSelection{}, gvk, gvr, true, ProfileRef{Key: "helm@1"}, prof)
	if err != nil {
		t.Fatal(err)
	}
	if got := tgt.fieldSelector.String(); got != helmrelease.FieldSelector {
		t.Fatalf("field selector %q, want %q", got, helmrelease.FieldSelector)
	}

	run := func(col *Collector) context.CancelFunc {
		runCtx, cancel := context.WithCancel(ctx)
		go func() { _ = col.Start(runCtx) }()
		col.SetTarget(tgt)
		return cancel
	}
	col := New(dynamic.NewForConfigOrDie(cp.Config), Options{Metadata: metadata.NewForConfigOrDie(cp.Config), Log: logr.Discard()})
	stop := run(col)
	defer stop()
	rows := waitRows(t, col, key, 1)
	if rows[0].Name != "demo" || string(rows[0].Attributes) != `{"chart":"demo","revision":2}` {
		t.Fatalf("row %s %s", rows[0].Name, rows[0].Attributes)
	}
	st, _ := col.Collect(key)
	if uid := st.Rows[0].UID; uid != helmrelease.ReleaseUID(ns, "demo") {
		t.Fatalf("row UID %s is not the release's", uid)
	}

	// The store holds the item the transform made, never the Secret: its extracted attributes
	// and the release's identity, nothing of data.release.
	col.mu.Lock()
	w := col.watches[gvk]
	col.mu.Unlock()
	items := w.items()
	if len(items) != 1 || items[0].release() == nil || items[0].release().Name != "demo" || items[0].attrCount() != 1 ||
		items[0].first.json != `{"chart":"demo","revision":2}` {
		t.Fatalf("stored items %+v", items)
	}
	for _, inf := range w.informers {
		for _, o := range inf.GetStore().List() {
			if _, ok := o.(*item); !ok {
				t.Fatalf("the store holds a %T", o)
			}
		}
	}

	// Without access to Secrets (the chart's rbac.helmReleases=false): forbidden.
	noSecrets, err := cp.AddUser("no-secrets")
	if err != nil {
		t.Fatal(err)
	}
	denied := New(dynamic.NewForConfigOrDie(noSecrets), Options{Log: logr.Discard()})
	stopDenied := run(denied)
	defer stopDenied()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := denied.Collect(key)
		if err == nil && st.Forbidden {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a collector that may not read Secrets never reported the target forbidden: %+v %v", st, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
