package agent

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/sink"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// BenchmarkExportLatency measures the time from an object update to the sink holding it, with
// the inventory's debounce at 1 s (the floor of the latency by design).
func BenchmarkExportLatency(b *testing.B) {
	ns := benchNamespace(b, "latency")
	createB(b, configMap(ns, "probe", map[string]string{"color": "start"}))
	createB(b, configMapInventory(ns, time.Second, 10*time.Second)...)
	recs := &recorders{}
	stop := startAgent(b, nil, "bench", ns, recs)
	defer stop()
	rec := recs.get(ns + "/rec")
	if !rec.WaitFor(60*time.Second, func(bs []*sink.Batch) bool { return len(bs) > 0 }) {
		b.Fatal("no initial export")
	}
	const samples = 20
	var lat []time.Duration
	b.ResetTimer()
	for i := range samples {
		want := fmt.Sprintf(`"color":"v%d"`, i)
		start := time.Now()
		if err := cp.Client.Update(context.Background(), configMap(ns, "probe", map[string]string{"color": fmt.Sprintf("v%d", i)})); err != nil {
			b.Fatal(err)
		}
		if !rec.WaitFor(30*time.Second, func(bs []*sink.Batch) bool {
			last := bs[len(bs)-1]
			return len(last.Envelope.Rows) > 0 && strings.Contains(string(last.Envelope.Rows[0].Attributes), want)
		}) {
			b.Fatalf("update %d not exported", i)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Milliseconds()), "p99-ms")
}

// BenchmarkAgentMemory creates objects of three kinds (ConfigMaps, Secrets and a CRD), three
// attributes each, and reports the memory the agent adds once it has exported them all.
func BenchmarkAgentMemory(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			if n > 10_000 && os.Getenv("KOLLECT_BENCH_LARGE") == "" {
				b.Skip("set KOLLECT_BENCH_LARGE=1 (make bench does) to create 100k objects")
			}
			benchMemory(b, n)
		})
	}
}

func benchMemory(b *testing.B, n int) {
	ns := benchNamespace(b, fmt.Sprintf("mem-%d", n))
	optInSecrets(b, ns) // a third of the objects are Secrets, read by a profile that does not decode them
	installWidgetCRD(b)
	createMany(b, ns, n)
	gvks := []kollectv1.GroupVersionKind{{Version: "v1", Kind: "ConfigMap"}, {Version: "v1", Kind: "Secret"},
		{Group: "shop.kollect.test", Version: "v1", Kind: "Widget"}}
	var targets []string
	for _, g := range gvks {
		name := strings.ToLower(g.Kind)
		targets = append(targets, name)
		createB(b, profileTarget(ns, name, g,
			kollectv1.Attribute{Name: "name", JSONPath: "{.metadata.name}"},
			kollectv1.Attribute{Name: "tier", JSONPath: "{.metadata.labels.tier}"},
			kollectv1.Attribute{Name: "size", CEL: "size(object.metadata.name)", Type: kollectv1.AttributeInt})...)
	}
	createB(b, recordingSink(ns), inventoryFor(ns, "inv", targets, time.Second))

	runtime.GC()
	debug.FreeOSMemory()
	base := rssBytes()
	recs := &recorders{}
	stop := startAgent(b, nil, "bench", ns, recs)
	defer stop()
	rec := recs.get(ns + "/rec")
	start := time.Now()
	if !rec.WaitFor(15*time.Minute, func(bs []*sink.Batch) bool { return len(bs) > 0 && bs[len(bs)-1].Envelope.ItemCount == n }) {
		b.Fatalf("not all %d rows exported", n)
	}
	b.ReportMetric(time.Since(start).Seconds(), "s-to-first-export")
	// The recorder keeps every batch; drop them so only the agent's own state is measured.
	recs.reset()
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if path := os.Getenv("KOLLECT_HEAP_PROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		_ = pprof.WriteHeapProfile(f)
		f.Close()
	}
	b.ReportMetric(float64(rssBytes()-base)/(1<<20), "agent-MiB-rss")
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
}

func (r *recorders) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byID = nil
}

func rssBytes() int64 {
	raw, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			kb, _ := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

func createMany(b *testing.B, ns string, n int) {
	var wg sync.WaitGroup
	work := make(chan int)
	var once sync.Once
	var firstErr error
	for range 16 {
		wg.Go(func() {
			for i := range work {
				var obj client.Object
				labels := map[string]string{"tier": []string{"web", "db", "cache"}[i%3]}
				name := fmt.Sprintf("obj-%06d", i)
				switch i % 3 {
				case 0:
					obj = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, Data: map[string]string{"k": "v"}}
				case 1:
					obj = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, StringData: map[string]string{"k": "v"}}
				default:
					u := &unstructured.Unstructured{}
					u.SetAPIVersion("shop.kollect.test/v1")
					u.SetKind("Widget")
					u.SetNamespace(ns)
					u.SetName(name)
					u.SetLabels(labels)
					obj = u
				}
				if err := cp.Client.Create(context.Background(), obj); err != nil {
					once.Do(func() { firstErr = err })
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
}

var widgetOnce sync.Once

func installWidgetCRD(b *testing.B) {
	widgetOnce.Do(func() {
		crd := &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: "widgets.shop.kollect.test"},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{
				Group: "shop.kollect.test", Scope: apiextensionsv1.NamespaceScoped,
				Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
					Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
						Type: "object", XPreserveUnknownFields: ptr(true)}}}},
			},
		}
		if err := cp.Client.Create(context.Background(), crd); err != nil && !strings.Contains(err.Error(), "already exists") {
			b.Fatal(err)
		}
		if err := cp.WaitForCRDs(context.Background(), []*apiextensionsv1.CustomResourceDefinition{crd}); err != nil {
			b.Fatal(err)
		}
		time.Sleep(2 * time.Second) // the apiserver delays the first create right after Established
	})
}

func benchNamespace(b *testing.B, name string) string {
	b.Helper()
	name = fmt.Sprintf("%s-%d", name, time.Now().UnixNano()%100000)
	if err := cp.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		b.Fatal(err)
	}
	return name
}

// optInSecrets labels namespace ns so that profiles on Secrets read its Secrets.
func optInSecrets(b *testing.B, ns string) {
	b.Helper()
	obj := &corev1.Namespace{}
	if err := cp.Client.Get(context.Background(), client.ObjectKey{Name: ns}, obj); err != nil {
		b.Fatal(err)
	}
	obj.Labels = map[string]string{kollectv1.LabelSecretExtraction: kollectv1.SecretExtractionAllowed}
	if err := cp.Client.Update(context.Background(), obj); err != nil {
		b.Fatal(err)
	}
}

func createB(b *testing.B, objs ...client.Object) {
	b.Helper()
	for _, o := range objs {
		if err := cp.Client.Create(context.Background(), o); err != nil {
			b.Fatalf("creating %s: %v", o.GetName(), err)
		}
	}
}
