package agentbench

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"kollect.dev/testenv"
)

// BenchmarkWatchList times the API server's streaming list (a watch with sendInitialEvents,
// as client-go's reflector runs it) of 100,000 ConfigMaps in 100 namespaces, the 100-tenant
// shape, through one cluster-wide watch in three encodings: JSON decoded into unstructured
// objects (what the agent's dynamic informers do), JSON into typed objects, and protobuf into
// typed objects. It reports the wall time to the end of the initial events and the CPU the
// API server and this process spent on it. Opt-in with KOLLECT_BENCH_TENANTS: seeding takes
// about two minutes.
func BenchmarkWatchList(b *testing.B) {
	if os.Getenv("KOLLECT_BENCH_TENANTS") == "" {
		b.Skip("KOLLECT_BENCH_TENANTS is not set")
	}
	ctx := context.Background()
	cp, _, _ := startServers(b, ctx, 100_000)
	if _, err := seed(ctx, cp.Config, shape{objects: 100_000, namespaces: 100, tenants: true}); err != nil {
		b.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	opts := func() metav1.ListOptions {
		yes := true
		return metav1.ListOptions{Watch: true, SendInitialEvents: &yes, AllowWatchBookmarks: true,
			ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}
	}
	typed := func(contentType string) func() (watch.Interface, error) {
		cfg := rest.CopyConfig(cp.Config)
		cfg.QPS, cfg.Burst = -1, 0
		cfg.ContentType = contentType
		cfg.AcceptContentTypes = contentType
		cs := kubernetes.NewForConfigOrDie(cfg)
		return func() (watch.Interface, error) { return cs.CoreV1().ConfigMaps("").Watch(ctx, opts()) }
	}
	cfg := rest.CopyConfig(cp.Config)
	cfg.QPS, cfg.Burst = -1, 0
	dyn := dynamic.NewForConfigOrDie(cfg)
	encodings := []struct {
		name  string
		watch func() (watch.Interface, error)
	}{
		{"json-unstructured", func() (watch.Interface, error) { return dyn.Resource(gvr).Watch(ctx, opts()) }},
		{"json-typed", typed("application/json")},
		{"protobuf-typed", typed("application/vnd.kubernetes.protobuf")},
	}
	for _, enc := range encodings {
		b.Run(enc.name, func(b *testing.B) {
			for range b.N {
				before, _ := testenv.CPUByCommand("kube-apiserver")
				self, _ := testenv.ProcessCPU(os.Getpid())
				start := time.Now()
				n, err := initialEvents(enc.watch)
				if err != nil {
					b.Fatal(err)
				}
				wall := time.Since(start)
				after, _ := testenv.CPUByCommand("kube-apiserver")
				selfAfter, _ := testenv.ProcessCPU(os.Getpid())
				if n < 100_000 { // and the API server's own few in kube-system
					b.Fatalf("%d initial events, want the 100000 seeded and a few", n)
				}
				b.ReportMetric(wall.Seconds(), "s")
				b.ReportMetric((after["kube-apiserver"] - before["kube-apiserver"]).Seconds(), "apiserver-CPU-s")
				b.ReportMetric((selfAfter - self).Seconds(), "client-CPU-s")
			}
		})
	}
}

// initialEvents counts a watch's initial events up to the bookmark that ends them.
func initialEvents(start func() (watch.Interface, error)) (int, error) {
	w, err := start()
	if err != nil {
		return 0, err
	}
	defer w.Stop()
	n := 0
	for ev := range w.ResultChan() {
		switch ev.Type {
		case watch.Added:
			n++
		case watch.Bookmark:
			if m, err := metaOf(ev); err == nil && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
				return n, nil
			}
		case watch.Error:
			return n, fmt.Errorf("watch error: %v", ev.Object)
		}
	}
	return n, fmt.Errorf("the watch ended after %d events", n)
}

func metaOf(ev watch.Event) (metav1.Object, error) {
	m, ok := ev.Object.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("a %T has no metadata", ev.Object)
	}
	return m, nil
}
