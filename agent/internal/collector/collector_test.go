package collector

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"

	"kollect.dev/agent/internal/profile"
	kollectv1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

var cp *testenv.ControlPlane

func TestMain(m *testing.M) {
	var err error
	if cp, err = testenv.Start("collector", testenv.Options{WithoutCRDs: true}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = cp.Stop()
	os.Exit(code)
}

func compile(t *testing.T, attrs ...kollectv1.Attribute) *profile.Compiled {
	t.Helper()
	c, err := profile.Compile(&kollectv1.KollectProfile{Spec: kollectv1.KollectProfileSpec{
		Target: kollectv1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Attributes: attrs}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestMetadataOnlyProfilesWatchMetadata: when every profile of a kind reads only metadata the
// watch asks the API server for object metadata only, and rows are still right; a profile
// that reads data switches the kind back to full objects.
func TestMetadataOnlyProfilesWatchMetadata(t *testing.T) {
	ctx := context.Background()
	ns := "meta-only"
	if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 100_000) // what a metadata-only watch never transfers
	for _, name := range []string{"a", "b"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"team": name}},
			Data: map[string]string{"blob": big}}
		if err := cp.Client.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	dyn := dynamic.NewForConfigOrDie(cp.Config)
	col := New(dyn, Options{Metadata: metadata.NewForConfigOrDie(cp.Config), Log: logr.Discard()})
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = col.Start(runCtx) }()

	gvk := schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	key := TargetKey{Namespace: ns, Name: "teams"}
	meta := compile(t, kollectv1.Attribute{Name: "team", JSONPath: "{.metadata.labels.team}"})
	tgt, err := NewTarget(key, kollectv1.TargetSelection{}, gvk, gvr, true, ProfileRef{Key: "meta@1"}, meta)
	if err != nil {
		t.Fatal(err)
	}
	col.SetTarget(tgt)
	rows := waitRows(t, col, key, 2)
	if string(rows[0].Attributes) != `{"team":"a"}` && string(rows[1].Attributes) != `{"team":"a"}` {
		t.Fatalf("rows %+v", rows)
	}
	if !isMetadataWatch(col, gvk) {
		t.Fatal("a metadata-only profile did not get a metadata watch")
	}

	full := compile(t, kollectv1.Attribute{Name: "size", CEL: "size(object.data.blob)", Type: kollectv1.AttributeInt})
	tgt2, err := NewTarget(TargetKey{Namespace: ns, Name: "sizes"}, kollectv1.TargetSelection{}, gvk, gvr, true, ProfileRef{Key: "full@1"}, full)
	if err != nil {
		t.Fatal(err)
	}
	col.SetTarget(tgt2)
	rows = waitRows(t, col, tgt2.Key, 2)
	if string(rows[0].Attributes) != `{"size":100000}` {
		t.Fatalf("full-object row %s", rows[0].Attributes)
	}
	if isMetadataWatch(col, gvk) {
		t.Fatal("a profile reading data must switch the kind to a full watch")
	}
}

func isMetadataWatch(c *Collector, gvk schema.GroupVersionKind) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.watches[gvk]
	return w != nil && w.metadataWatch
}

func waitRows(t *testing.T, c *Collector, key TargetKey, n int) []rowView {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		st, err := c.Collect(key)
		if err == nil && st.Synced && len(st.Rows) == n {
			out := make([]rowView, len(st.Rows))
			for i, r := range st.Rows {
				out[i] = rowView{Name: r.Name, Attributes: r.Attributes}
			}
			return out
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("target %s never selected %d rows", key, n)
	return nil
}

type rowView struct {
	Name       string
	Attributes []byte
}
