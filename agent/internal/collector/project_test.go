package collector

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"kollect.dev/agent/internal/profile"
	kollectv1 "kollect.dev/api/v1alpha1"
)

var (
	cmGVK = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	cmGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
)

// heavyCEL runs into the per-evaluation cost limit on every object with data.blob (a
// comprehension over its characters, nested three deep); on objects without it, it is cheap.
const heavyCEL = "has(object.data) && has(object.data.blob) ? object.data.blob.split('').all(a, object.data.blob.split('').all(b, " +
	"object.data.blob.split('').all(c, a != 'z'))) : false"

func cm(ns, name string, lbls map[string]string, data map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"namespace": ns, "name": name, "uid": ns + "-" + name}}}
	if lbls != nil {
		u.SetLabels(lbls)
	}
	if data != nil {
		u.Object["data"] = data
	}
	return u
}

func target(t *testing.T, key TargetKey, sel kollectv1.TargetSelection, profileKey string, prof *profile.Compiled) *Target {
	t.Helper()
	tg, err := NewTarget(key, sel, cmGVK, cmGVR, true, ProfileRef{Key: profileKey}, prof)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

// projector is a watch that is never started: its transform is called directly.
func projector(targets []*Target, nsLabels func(string) (labels.Set, bool), metrics *Metrics, budgets map[string]*budget) *gvkWatch {
	budgetFor := func(k string) *budget { return budgets[k] }
	proj := buildProjection(targets, nil, budgetFor, nsLabels, metrics)
	return &gvkWatch{gvk: cmGVK, proj: proj}
}

func evaluations(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "kollect_profile_evaluations_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == name {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestProfilesRunOnlyOnObjectsTheirTargetsSelect is issue 18 point 10, select before extract:
// the heavy profile of namespace shop is evaluated on the objects its target selects and on
// nothing else (other namespaces, excluded names, other labels, objects its match refuses),
// while the cluster-wide profile of another tenant is evaluated on everything. Objects no
// target of a profile selects hold no attributes of it.
func TestProfilesRunOnlyOnObjectsTheirTargetsSelect(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics := NewMetrics(reg)
	heavy := compile(t, kollectv1.Attribute{Name: "h", CEL: heavyCEL, Type: kollectv1.AttributeBool})
	cheap := compile(t, kollectv1.Attribute{Name: "n", JSONPath: "{.metadata.name}"})
	shop := target(t, TargetKey{Namespace: "shop", Name: "heavy"}, kollectv1.TargetSelection{
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "shop"}},
		Names:         &kollectv1.NameSelection{Exclude: []string{"skip-*"}},
		Match:         "object.metadata.name != 'refused'",
	}, "shop/heavy@1/u1", heavy)
	all := target(t, TargetKey{Name: "everything"}, kollectv1.TargetSelection{}, "ops/cheap@1/u2", cheap)
	w := projector([]*Target{shop, all}, nil, metrics, nil)
	tr := w.transform(metrics)

	shopLabels := map[string]string{"app": "shop"}
	objs := []*unstructured.Unstructured{
		cm("shop", "a", shopLabels, nil),                    // selected
		cm("shop", "b", shopLabels, nil),                    // selected
		cm("shop", "skip-c", shopLabels, nil),               // excluded by name
		cm("shop", "refused", shopLabels, nil),              // refused by the match
		cm("shop", "d", map[string]string{"app": "x"}, nil), // other labels
	}
	for i := range 50 {
		objs = append(objs, cm("other", fmt.Sprintf("o-%d", i), shopLabels, map[string]any{"blob": strings.Repeat("x", 200)}))
	}
	items := map[string]*item{}
	for _, o := range objs {
		out, err := tr(o)
		if err != nil {
			t.Fatal(err)
		}
		it := out.(*item)
		items[it.namespace+"/"+it.name] = it
	}
	if got := evaluations(t, reg, "shop/heavy"); got != 2 {
		t.Errorf("the shop profile was evaluated on %v objects, want the 2 its target selects", got)
	}
	if got := evaluations(t, reg, "ops/cheap"); got != float64(len(objs)) {
		t.Errorf("the cluster-wide profile was evaluated on %v objects, want %d", got, len(objs))
	}
	hi := w.proj.profileIndex["shop/heavy@1/u1"]
	for key, it := range items {
		want := notSelected
		if key == "shop/a" || key == "shop/b" {
			want = evaluated
		}
		if ex := it.attr(hi); ex.skip != want || (want == notSelected && (ex.json != "" || ex.err != nil)) {
			t.Errorf("%s: the shop profile's extraction is %+v, want skip=%d and nothing stored", key, ex, want)
		}
	}
	if got := items["shop/a"].attr(hi).json; got != `{"h":false}` {
		t.Errorf("shop/a: %s", got)
	}
}

// TestNamespaceSelectorRefusalIsRemembered: an object in a namespace whose labels a target's
// namespace selector refuses is not evaluated, and once the namespace's labels change so that
// the selector selects it, the watch knows it must list again; a namespace whose labels are
// not known yet is evaluated (the selection is applied again when collected).
func TestNamespaceSelectorRefusalIsRemembered(t *testing.T) {
	nsLabels := map[string]labels.Set{"blue": {"team": "blue"}, "red": {"team": "red"}}
	lookup := func(ns string) (labels.Set, bool) { l, ok := nsLabels[ns]; return l, ok }
	prof := compile(t, kollectv1.Attribute{Name: "n", JSONPath: "{.metadata.name}"})
	tg := target(t, TargetKey{Name: "blue"}, kollectv1.TargetSelection{Namespaces: &kollectv1.NamespaceSelection{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "blue"}}}}, "p/p@1/u", prof)
	reg := prometheus.NewRegistry()
	metrics := NewMetrics(reg)
	w := projector([]*Target{tg}, lookup, metrics, nil)
	tr := w.transform(metrics)
	for _, o := range []*unstructured.Unstructured{cm("blue", "a", nil, nil), cm("red", "b", nil, nil), cm("unknown", "c", nil, nil)} {
		if _, err := tr(o); err != nil {
			t.Fatal(err)
		}
	}
	if got := evaluations(t, reg, "p/p"); got != 2 {
		t.Fatalf("evaluated on %v objects, want 2 (blue, and unknown whose labels are not known)", got)
	}
	if w.nowSelected(lookup) {
		t.Fatal("nothing was relabelled, yet the watch would list again")
	}
	nsLabels["red"] = labels.Set{"team": "blue"}
	if !w.nowSelected(lookup) {
		t.Fatal("red now has the selected label, but the watch does not know its objects need evaluating")
	}
}

// TestSelectionChangeRestartsTheWatch: every part of a target's selection is part of what the
// watch computes, so a target that selects more (an exclusion dropped) gets a new watch that
// evaluates the objects it did not before.
func TestSelectionChangeRestartsTheWatch(t *testing.T) {
	prof := compile(t, kollectv1.Attribute{Name: "n", JSONPath: "{.metadata.name}"})
	key := TargetKey{Namespace: "shop", Name: "t"}
	narrow := target(t, key, kollectv1.TargetSelection{Names: &kollectv1.NameSelection{Exclude: []string{"b"}}}, "p@1", prof)
	wide := target(t, key, kollectv1.TargetSelection{}, "p@1", prof)
	if narrow.projectionID() == wide.projectionID() {
		t.Fatal("dropping a name exclusion does not restart the watch: the excluded objects would never be evaluated")
	}
}

// TestBudgetQuarantinesOnlyTheProfileOverIt is issue 18 point 10, budgets: a profile that
// spends its burst is quarantined (once, with a message naming it and the budget) and no
// longer evaluated, while another profile on the same watch goes on being evaluated on every
// object. Counted in evaluations and cost units, not time.
func TestBudgetQuarantinesOnlyTheProfileOverIt(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics := NewMetrics(reg)
	heavy := compile(t, kollectv1.Attribute{Name: "h", CEL: heavyCEL, Type: kollectv1.AttributeBool, Optional: true})
	cheap := compile(t, kollectv1.Attribute{Name: "n", JSONPath: "{.metadata.name}"})
	hot := target(t, TargetKey{Namespace: "shop", Name: "heavy"}, kollectv1.TargetSelection{}, "shop/heavy@1/u1", heavy)
	cool := target(t, TargetKey{Namespace: "shop", Name: "cheap"}, kollectv1.TargetSelection{}, "shop/cheap@1/u2", cheap)
	frozen := time.Unix(1000, 0) // no refill: the burst is all there is
	opts := BudgetOptions{Rate: 1, Burst: 3_000_000}
	budgets := map[string]*budget{
		"shop/heavy@1/u1": newBudget("shop/heavy@1/u1", opts, func() time.Time { return frozen }),
		"shop/cheap@1/u2": newBudget("shop/cheap@1/u2", opts, func() time.Time { return frozen }),
	}
	w := projector([]*Target{hot, cool}, nil, metrics, budgets)
	var tripped atomic.Int32
	w.onQuarantine = func(key string) {
		if key != "shop/heavy@1/u1" {
			t.Errorf("quarantined %s", key)
		}
		tripped.Add(1)
	}
	tr := w.transform(metrics)
	blob := map[string]any{"blob": strings.Repeat("x", 200)}
	for i := range 20 {
		if _, err := tr(cm("shop", fmt.Sprintf("c-%d", i), nil, blob)); err != nil {
			t.Fatal(err)
		}
	}
	// Cut off at the per-evaluation limit, each evaluation costs just over 1M: the third
	// overdraws the burst of 3M.
	if got := evaluations(t, reg, "shop/heavy"); got != 3 {
		t.Errorf("the heavy profile was evaluated on %v objects, want 3 (the burst of 3M at 1M each, then quarantined)", got)
	}
	if got := evaluations(t, reg, "shop/cheap"); got != 20 {
		t.Errorf("the cheap profile was evaluated on %v objects, want all 20", got)
	}
	if n := tripped.Load(); n != 1 {
		t.Errorf("quarantined %d times, want once", n)
	}
	msg, q := budgets["shop/heavy@1/u1"].quarantined()
	if !q || !strings.Contains(msg, "KollectProfile shop/heavy is quarantined") || !strings.Contains(msg, "a burst of 3000000 units refilled at 1 per second") {
		t.Errorf("quarantine message %q", msg)
	}
	if got := testutil.ToFloat64(metrics.cost.WithLabelValues("shop/heavy")); got <= 3_000_000 {
		t.Errorf("cost counted %v, want over 3M", got)
	}
	// A quarantined profile's later objects are marked, not evaluated.
	out, _ := tr(cm("shop", "late", nil, blob))
	if ex := out.(*item).attr(w.proj.profileIndex["shop/heavy@1/u1"]); ex.skip != skippedQuarantined {
		t.Errorf("a quarantined profile's extraction is %+v", ex)
	}
}

// TestBudgetRefills: spending within the rate never quarantines.
func TestBudgetRefills(t *testing.T) {
	now := time.Unix(1000, 0)
	b := newBudget("p/p@1/u", BudgetOptions{Rate: 100, Burst: 100}, func() time.Time { return now })
	for range 100 {
		now = now.Add(time.Second)
		if b.charge(100) {
			t.Fatal("a profile spending its rate was quarantined")
		}
	}
	if !b.charge(101) {
		t.Fatal("spending more than a full bucket did not quarantine")
	}
}

// TestBusyMeterSaysBehind: a transform busy through the window is behind; one that has been
// idle since is not.
func TestBusyMeterSaysBehind(t *testing.T) {
	now := time.Unix(1000, 0)
	m := newBusyMeter(BehindOptions{Window: 10 * time.Second, Threshold: 0.9}, func() time.Time { return now })
	for range 100 { // 10 s, busy 95% of it
		now = now.Add(100 * time.Millisecond)
		m.add(95 * time.Millisecond)
	}
	if f, b := m.busy(); !b {
		t.Fatalf("busy %.2f of the window is not behind", f)
	}
	now = now.Add(6 * time.Second)
	if f, b := m.busy(); b {
		t.Fatalf("idle for 6 s but still behind (%.2f)", f)
	}
	for range 100 {
		now = now.Add(100 * time.Millisecond)
		m.add(20 * time.Millisecond)
	}
	if f, b := m.busy(); b {
		t.Fatalf("busy %.2f is behind", f)
	}
}

// BenchmarkTransformNotSelected is the cost a heavy profile of namespace shop adds to each
// object of another namespace: its target's cheap selection only (see project).
func BenchmarkTransformNotSelected(b *testing.B) {
	heavy, err := profile.Compile(&kollectv1.KollectProfile{Spec: kollectv1.KollectProfileSpec{Target: kollectv1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
		Attributes: []kollectv1.Attribute{{Name: "h", CEL: heavyCEL, Type: kollectv1.AttributeBool, Optional: true}}}})
	if err != nil {
		b.Fatal(err)
	}
	cheap, err := profile.Compile(&kollectv1.KollectProfile{Spec: kollectv1.KollectProfileSpec{Target: kollectv1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
		Attributes: []kollectv1.Attribute{{Name: "n", JSONPath: "{.metadata.name}"}}}})
	if err != nil {
		b.Fatal(err)
	}
	shop, _ := NewTarget(TargetKey{Namespace: "shop", Name: "heavy"}, kollectv1.TargetSelection{}, cmGVK, cmGVR, true, ProfileRef{Key: "shop/heavy@1/u"}, heavy)
	other, _ := NewTarget(TargetKey{Namespace: "other", Name: "cheap"}, kollectv1.TargetSelection{}, cmGVK, cmGVR, true, ProfileRef{Key: "other/cheap@1/u"}, cheap)
	w := projector([]*Target{shop, other}, nil, nil, nil)
	tr := w.transform(nil)
	obj := cm("other", "o", nil, map[string]any{"blob": strings.Repeat("x", 200)})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tr(obj); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTransformHundredTenants is the transform of one small ConfigMap when 100 tenants
// each have a profile and a target of their own namespace, as the agent benchmark's
// 100-tenant shape: only the object's tenant's target is considered.
func BenchmarkTransformHundredTenants(b *testing.B) {
	var targets []*Target
	for i := range 100 {
		ns := fmt.Sprintf("bench-%03d", i)
		prof, err := profile.Compile(&kollectv1.KollectProfile{Spec: kollectv1.KollectProfileSpec{Target: kollectv1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			Attributes: []kollectv1.Attribute{{Name: "app", JSONPath: "{.metadata.labels.app}"}, {Name: "tier", JSONPath: "{.metadata.labels.tier}"},
				{Name: "mode", JSONPath: "{.data.mode}"}, {Name: "entries", CEL: "size(object.data)", Type: kollectv1.AttributeInt}}}})
		if err != nil {
			b.Fatal(err)
		}
		t, err := NewTarget(TargetKey{Namespace: ns, Name: "configmaps"}, kollectv1.TargetSelection{}, cmGVK, cmGVR, true,
			ProfileRef{Key: ns + "/configmaps@1/u"}, prof)
		if err != nil {
			b.Fatal(err)
		}
		targets = append(targets, t)
	}
	w := projector(targets, nil, nil, nil)
	tr := w.transform(nil)
	obj := cm("bench-042", "cm-0004242", map[string]string{"app": "app-42", "tier": "web"}, map[string]any{"mode": "blue", "replicas": "3"})
	b.ReportAllocs()
	for b.Loop() {
		it, err := tr(obj)
		if err != nil {
			b.Fatal(err)
		}
		if it.(*item).attrCount() != 1 {
			b.Fatal("the object's tenant's profile was not evaluated")
		}
	}
}
