package preview

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"kollect.dev/agent/internal/cli/offline"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

const benchObjects = 10_000

var seedBench = sync.OnceValue(func() error {
	ctx := context.Background()
	if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}); err != nil {
		return err
	}
	// 16 writers at once: seeding takes seconds, not a minute.
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < benchObjects; i += 16 {
				err := cp.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: fmt.Sprintf("cm-%05d", i),
					Labels: map[string]string{"team": fmt.Sprintf("t%d", i%20), "app": fmt.Sprintf("app-%d", i)}},
					Data: map[string]string{"size": fmt.Sprint(i % 100), "blob": "some configuration text of a typical size"}})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
})

const benchBundle = `
apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: cm}
spec:
  target: {version: v1, kind: ConfigMap}
  attributes:
    - {name: team, jsonPath: "{.metadata.labels.team}"}
    - {name: app, jsonPath: "{.metadata.labels.app}"}
    - {name: size, jsonPath: "{.data.size}", type: int}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectTarget
metadata: {name: cms}
spec:
  profileRef: {name: cm}
  namespaces: {include: [bench]}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectInventory
metadata: {name: cms}
spec:
  targets: [{name: cms}]
  rollups: [{name: per-team, groupBy: [team]}]
`

// pageCounter is a dynamic client that records the most objects one list response held: what
// an evaluation holds of a kind at once, since it projects a page before asking for the next.
type pageCounter struct {
	dynamic.Interface
	peak *atomic.Int64
}

func (p pageCounter) Resource(gvr schema.GroupVersionResource) dynamic.NamespaceableResourceInterface {
	return pageCounterResource{p.Interface.Resource(gvr), p.peak}
}

type pageCounterResource struct {
	dynamic.NamespaceableResourceInterface
	peak *atomic.Int64
}

func (p pageCounterResource) List(ctx context.Context, opts metav1.ListOptions) (*unstructured.UnstructuredList, error) {
	l, err := p.NamespaceableResourceInterface.List(ctx, opts)
	if err == nil {
		for n := int64(len(l.Items)); ; {
			cur := p.peak.Load()
			if n <= cur || p.peak.CompareAndSwap(cur, n) {
				break
			}
		}
	}
	return l, err
}

// BenchmarkEvaluate10k: a preview of one target over 10k ConfigMaps (three attributes, a
// rollup), listed from a real API server in pages of 500. peak-objects is the most objects
// one list response held.
func BenchmarkEvaluate10k(b *testing.B) {
	if err := seedBench(); err != nil {
		b.Fatal(err)
	}
	env := envFor(b, cp.Config)
	var peak atomic.Int64
	env.Dynamic = pageCounter{env.Dynamic, &peak}
	req := &fleetv1.PreviewRequest{Id: "bench", Manifests: benchBundle}
	b.ReportAllocs()
	for b.Loop() {
		res := Evaluate(b.Context(), req, env)
		if res.GetError() != "" || len(res.GetTargets()) != 1 || res.GetTargets()[0].GetRows() != benchObjects {
			b.Fatalf("preview: %v", res)
		}
	}
	b.ReportMetric(float64(peak.Load()), "peak-objects")
}

// BenchmarkList10k is the listing alone, pages of 500 decoded and dropped: what of
// BenchmarkEvaluate10k the API server and the decoding of its answers cost.
func BenchmarkList10k(b *testing.B) {
	if err := seedBench(); err != nil {
		b.Fatal(err)
	}
	env := envFor(b, cp.Config)
	ri := env.Dynamic.Resource(corev1.SchemeGroupVersion.WithResource("configmaps")).Namespace("bench")
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		if err := offline.ListPages(b.Context(), ri, 0, func(page []*unstructured.Unstructured) { n += len(page) }); err != nil || n != benchObjects {
			b.Fatalf("listed %d: %v", n, err)
		}
	}
}
