package agent

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/collector"
	"kollect.dev/agent/internal/inventory/delivery"
	"kollect.dev/agent/internal/sink"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// heavyCEL runs into the per-evaluation cost limit on every ConfigMap with data.blob: three
// nested comprehensions over its characters. It compiles: on an empty object it is cheap.
const heavyCEL = "has(object.data) && has(object.data.blob) ? object.data.blob.split('').all(a, object.data.blob.split('').all(b, " +
	"object.data.blob.split('').all(c, a != 'z'))) : false"

// tenant declares a profile of one attribute, a target of the namespace's ConfigMaps, a sink
// named rec-<name> and an inventory, all named name.
func tenant(ns, name string, attr kollectv1.Attribute) []client.Object {
	timing := kollectv1.ExportTiming{Debounce: metav1.Duration{Duration: 200 * time.Millisecond}, MaxDelay: metav1.Duration{Duration: time.Second}}
	return []client.Object{
		&kollectv1.KollectProfile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: kollectv1.KollectProfileSpec{
			Target: kollectv1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Attributes: []kollectv1.Attribute{attr}}},
		&kollectv1.KollectTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: kollectv1.KollectTargetSpec{
			ProfileRef: kollectv1.LocalObjectReference{Name: name}}},
		&kollectv1.KollectSnapshotSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rec-" + name}, Spec: kollectv1.KollectSnapshotSinkSpec{
			Type: kollectv1.SnapshotSinkGit, Git: &kollectv1.GitSinkConfig{URL: "file:///unused"}}},
		&kollectv1.KollectInventory{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: kollectv1.KollectInventorySpec{
			Targets: []kollectv1.LocalObjectReference{{Name: name}}, ExportTiming: timing,
			Sinks: kollectv1.SinkReferences{Snapshot: []kollectv1.LocalObjectReference{{Name: "rec-" + name}}}}},
	}
}

// createConfigMaps creates n ConfigMaps in ns, a few at a time.
func createConfigMaps(t *testing.T, ns, prefix string, n int, data map[string]string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%04d", prefix, i)}, Data: data}
				if err := cp.Client.Create(context.Background(), cm); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// startBudgetAgent runs an agent over every namespace whose metrics land in reg.
func startBudgetAgent(t *testing.T, recs *recorders, reg *prometheus.Registry, budget *collector.BudgetOptions, tweak ...func(*Options)) {
	t.Helper()
	o := Options{AllowLocalSinks: true,
		Cluster: "c1", MetricsAddr: "0", HealthAddr: "0", SkipNameValidation: true, Sinks: recs.factories(),
		CacheDir: t.TempDir(), Log: testr.NewWithOptions(t, testr.Options{Verbosity: 0}), Registry: reg, ProfileBudget: budget,
		Backoff: delivery.Backoff{Base: 100 * time.Millisecond, Max: time.Second, TerminalDelay: time.Second, BreakerThreshold: 5, BreakerCooldown: time.Second},
	}
	for _, f := range tweak {
		f(&o)
	}
	mgr, err := New(cp.Config, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("agent: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// profileCounter reads a per-profile counter of the agent's metrics.
func profileCounter(t *testing.T, reg *prometheus.Registry, metric, profile string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != metric {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "profile" && l.GetValue() == profile {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func waitRowCount(t *testing.T, recs *recorders, sinkName string, n int) {
	t.Helper()
	if !recs.get(sinkName).WaitFor(60*time.Second, func(b []*sink.Batch) bool { return len(b) > 0 && len(b[len(b)-1].Envelope.Rows) == n }) {
		got := 0
		if last := recs.get(sinkName).Last(); last != nil {
			got = len(last.Envelope.Rows)
		}
		t.Fatalf("%s never received %d rows (last: %d)", sinkName, n, got)
	}
}

// TestOneTenantsExpressionDoesNotStallOthers is issue 18 point 10's scenario: a profile whose
// CEL runs to the cost limit on every object, in namespace budget-shop, and a few thousand
// ConfigMaps of another tenant. The other inventory exports every item and is Synced, and the
// heavy profile is evaluated on its own namespace's objects only: the agent's evaluation
// counter says so (on main it was evaluated on every ConfigMap of the shared watch).
func TestOneTenantsExpressionDoesNotStallOthers(t *testing.T) {
	shop, other := namespace(t, "budget-shop"), namespace(t, "budget-other")
	blob := map[string]string{"blob": strings.Repeat("x", 200)}
	const n = 2000
	createConfigMaps(t, other, "cm", n, blob)
	createConfigMaps(t, shop, "heavy", 3, blob)
	create(t, tenant(shop, "heavy", kollectv1.Attribute{Name: "h", CEL: heavyCEL, Type: kollectv1.AttributeBool, Optional: true})...)
	create(t, tenant(other, "cheap", kollectv1.Attribute{Name: "name", JSONPath: "{.metadata.name}"})...)
	recs := &recorders{}
	reg := prometheus.NewRegistry()
	startBudgetAgent(t, recs, reg, nil)

	waitRowCount(t, recs, other+"/rec-cheap", n)
	inv := &kollectv1.KollectInventory{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "cheap"}}
	conds := func() []metav1.Condition { return inv.Status.Conditions }
	scopeCondition(t, inv, conds, kollectv1.ConditionSynced, metav1.ConditionTrue, kollectv1.ReasonExported)
	if got := inv.Status.ItemCount; got != n {
		t.Fatalf("the other inventory reports %d items, want %d", got, n)
	}
	// The heavy profile fails on its three objects (the per-evaluation cost limit), which its
	// target reports: it was evaluated on them, and (the counter says) on nothing else.
	tgt := &kollectv1.KollectTarget{ObjectMeta: metav1.ObjectMeta{Namespace: shop, Name: "heavy"}}
	scopeCondition(t, tgt, func() []metav1.Condition { return tgt.Status.Conditions }, kollectv1.ConditionDegraded, metav1.ConditionTrue,
		kollectv1.ReasonExtractionFailed, "3 objects not exported", "cost limit exceeded")
	// A watch restart (targets arriving one by one) or a relist evaluates an object again, so
	// the counts are bounds: the heavy profile ran on its 3 objects a few times at most, never
	// on the 2,000 outside its targets; the other one on each of its objects at least once.
	if got := profileCounter(t, reg, "kollect_profile_evaluations_total", shop+"/heavy"); got < 3 || got > 30 {
		t.Fatalf("the heavy profile was evaluated %v times, want a few times its 3 objects (never the %d of %s)", got, n, other)
	}
	if got := profileCounter(t, reg, "kollect_profile_evaluations_total", other+"/cheap"); got < float64(n) {
		t.Fatalf("the other profile was evaluated %v times, want at least once on each of its %d objects", got, n)
	}
}

// TestProfileOverItsBudgetIsQuarantined is issue 18 point 10's quarantine: a profile that
// spends its budget is quarantined with a condition naming it and the budget, on the profile,
// its target and its inventory (whose rows are unknown, not empty); another inventory on the
// same kind and namespace exports every row; a new generation of the profile lifts it.
func TestProfileOverItsBudgetIsQuarantined(t *testing.T) {
	ns := namespace(t, "quarantine")
	blob := map[string]string{"blob": strings.Repeat("x", 200)}
	createConfigMaps(t, ns, "cm", 10, blob)
	create(t, tenant(ns, "heavy", kollectv1.Attribute{Name: "h", CEL: heavyCEL, Type: kollectv1.AttributeBool, Optional: true})...)
	create(t, tenant(ns, "cheap", kollectv1.Attribute{Name: "name", JSONPath: "{.metadata.name}"})...)
	recs := &recorders{}
	reg := prometheus.NewRegistry()
	// A burst of two evaluations at the per-evaluation limit, and a refill that never matters.
	startBudgetAgent(t, recs, reg, &collector.BudgetOptions{Rate: 1, Burst: 2_000_000})

	waitRowCount(t, recs, ns+"/rec-cheap", 10)
	prof := &kollectv1.KollectProfile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "heavy"}}
	scopeCondition(t, prof, func() []metav1.Condition { return prof.Status.Conditions }, kollectv1.ConditionReady, metav1.ConditionFalse,
		kollectv1.ReasonBudgetExceeded, "KollectProfile quarantine/heavy is quarantined", "a burst of 2000000 units refilled at 1 per second")
	tgt := &kollectv1.KollectTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "heavy"}}
	scopeCondition(t, tgt, func() []metav1.Condition { return tgt.Status.Conditions }, kollectv1.ConditionReady, metav1.ConditionFalse,
		kollectv1.ReasonBudgetExceeded, "KollectProfile quarantine/heavy")
	inv := &kollectv1.KollectInventory{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "heavy"}}
	conds := func() []metav1.Condition { return inv.Status.Conditions }
	scopeCondition(t, inv, conds, kollectv1.ConditionDegraded, metav1.ConditionTrue, kollectv1.ReasonBudgetExceeded, "quarantine/heavy")
	scopeCondition(t, inv, conds, kollectv1.ConditionSynced, metav1.ConditionFalse, kollectv1.ReasonTargetsIncomplete, "rows of quarantine/heavy are unknown")
	if got := profileCounter(t, reg, "kollect_profile_evaluations_total", ns+"/heavy"); got != 2 {
		t.Fatalf("the heavy profile was evaluated on %v objects, want 2 (its burst), then never again", got)
	}
	if got := profileCounter(t, reg, "kollect_profile_quarantines_total", ns+"/heavy"); got != 1 {
		t.Fatalf("kollect_profile_quarantines_total is %v, want 1", got)
	}
	cheap := &kollectv1.KollectInventory{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cheap"}}
	scopeCondition(t, cheap, func() []metav1.Condition { return cheap.Status.Conditions }, kollectv1.ConditionSynced, metav1.ConditionTrue, kollectv1.ReasonExported)

	// A new generation starts with a full budget.
	updateObject(t, prof, func() { prof.Spec.Attributes[0].CEL = "has(object.data) && has(object.data.blob)" })
	scopeCondition(t, prof, func() []metav1.Condition { return prof.Status.Conditions }, kollectv1.ConditionReady, metav1.ConditionTrue, kollectv1.ReasonCompiled)
	waitRowCount(t, recs, ns+"/rec-heavy", 10)
	scopeCondition(t, inv, conds, kollectv1.ConditionDegraded, metav1.ConditionFalse, kollectv1.ReasonNoProblems)
}

// TestWatchBehindIsNotSynced: an inventory whose kind's watch is behind says so (Synced=False
// WatchBehind, naming the target) instead of Synced=True, and turns Synced again once the
// watch has caught up. The threshold is set so low that any projection work in the window
// counts as behind, so the test needs no load it cannot control: a trickle of updates keeps
// the watch "behind" while it runs, and its end lets the watch catch up.
func TestWatchBehindIsNotSynced(t *testing.T) {
	ns := namespace(t, "behind")
	createConfigMaps(t, ns, "cm", 20, map[string]string{"k": "v"})
	create(t, tenant(ns, "inv", kollectv1.Attribute{Name: "k", JSONPath: "{.data.k}"})...)
	recs := &recorders{}
	startBudgetAgent(t, recs, prometheus.NewRegistry(), nil, func(o *Options) {
		o.Behind = &collector.BehindOptions{Window: 3 * time.Second, Threshold: 1e-9}
	})
	waitRowCount(t, recs, ns+"/rec-inv", 20)

	stop := make(chan struct{})
	trickled := make(chan struct{})
	go func() {
		defer close(trickled)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			cm := &corev1.ConfigMap{}
			if err := cp.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "cm-0000"}, cm); err != nil {
				t.Errorf("trickle: %v", err)
				return
			}
			cm.Data = map[string]string{"k": fmt.Sprint(i)}
			if err := cp.Client.Update(context.Background(), cm); err != nil {
				t.Errorf("trickle: %v", err)
				return
			}
		}
	}()
	inv := &kollectv1.KollectInventory{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "inv"}}
	conds := func() []metav1.Condition { return inv.Status.Conditions }
	scopeCondition(t, inv, conds, kollectv1.ConditionSynced, metav1.ConditionFalse, kollectv1.ReasonWatchBehind, "is behind")
	close(stop)
	<-trickled
	scopeCondition(t, inv, conds, kollectv1.ConditionSynced, metav1.ConditionTrue, kollectv1.ReasonExported)
}
