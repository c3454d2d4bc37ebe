package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/inventory/delivery"
	"kollect.dev/agent/internal/sink"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// condition waits for a condition of obj with the given status and reason whose message holds
// every want.
func scopeCondition(t *testing.T, obj client.Object, conds func() []metav1.Condition, typ string, status metav1.ConditionStatus, reason string, want ...string) {
	t.Helper()
	eventually(t, 20*time.Second, fmt.Sprintf("%s %s=%s/%s", obj.GetName(), typ, status, reason), func() (bool, string) {
		if err := cp.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, err.Error()
		}
		c := apimeta.FindStatusCondition(conds(), typ)
		if c == nil || c.Status != status || c.Reason != reason {
			return false, fmt.Sprintf("%+v", conds())
		}
		for _, w := range want {
			if !strings.Contains(c.Message, w) {
				return false, c.Message
			}
		}
		return true, ""
	})
}

func setScope(t *testing.T, ns string, mutate func(*kollectv1.KollectScopeSpec)) {
	t.Helper()
	s := &kollectv1.KollectScope{}
	err := cp.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "limits"}, s)
	if client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	mutate(&s.Spec)
	if err != nil {
		s.Namespace, s.Name = ns, "limits"
		err = cp.Client.Create(context.Background(), s)
	} else {
		err = cp.Client.Update(context.Background(), s)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func allowConfigMaps(ns string) func(*kollectv1.KollectScopeSpec) {
	return func(s *kollectv1.KollectScopeSpec) {
		s.AllowedKinds = []kollectv1.GroupKindRule{{Kind: "ConfigMap"}}
		s.AllowedNamespaces = []string{ns}
		s.AllowedSinks = []kollectv1.SinkRule{{Family: "*"}}
	}
}

func TestScopeTightenedAfterAdmissionDegradesAndStopsRows(t *testing.T) {
	ns := namespace(t, "tighten")
	setScope(t, ns, allowConfigMaps(ns))
	create(t, configMap(ns, "a", map[string]string{"color": "red"}), configMap(ns, "b", nil))
	create(t, configMapInventory(ns, 200*time.Millisecond, time.Second)...)
	recs := &recorders{}
	startAgent(t, nil, "c1", ns, recs)
	rec := recs.get(ns + "/rec")
	if !rec.WaitFor(30*time.Second, func(b []*sink.Batch) bool { return len(b) > 0 && len(b[len(b)-1].Envelope.Rows) == 2 }) {
		t.Fatal("no export of a,b while permitted")
	}

	target := &kollectv1.KollectTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}}
	eventually(t, 10*time.Second, "target counts", func() (bool, string) {
		_ = cp.Client.Get(context.Background(), client.ObjectKeyFromObject(target), target)
		return target.Status.ObjectCount == 2, fmt.Sprintf("%+v", target.Status)
	})

	// The platform team withdraws ConfigMaps: the target is degraded, its rows leave the export.
	setScope(t, ns, func(s *kollectv1.KollectScopeSpec) {
		s.AllowedKinds = []kollectv1.GroupKindRule{{Group: "apps", Kind: "*"}}
	})
	scopeCondition(t, target, func() []metav1.Condition { return target.Status.Conditions }, kollectv1.ConditionDegraded, metav1.ConditionTrue,
		"ScopeKindDenied", "KollectScope tighten/limits does not allow core/ConfigMap", "not permitted")
	inv := &kollectv1.KollectInventory{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "inv"}}
	scopeCondition(t, inv, func() []metav1.Condition { return inv.Status.Conditions }, kollectv1.ConditionDegraded, metav1.ConditionTrue,
		"ScopeKindDenied", "target tighten/cm not permitted", "its rows are not exported")
	violations(t, ns, 2) // the target and the inventory
	if !rec.WaitFor(10*time.Second, func(b []*sink.Batch) bool { return len(b[len(b)-1].Envelope.Rows) == 0 }) {
		t.Fatalf("rows still exported after the scope withdrew the kind: %s", rowNames(rec.Last().Envelope.Rows))
	}
	if target.Status.ObjectCount != 2 {
		t.Fatalf("objectCount %d: a denied target must not report its objects as gone", target.Status.ObjectCount)
	}

	// Permission back: the rows return.
	setScope(t, ns, allowConfigMaps(ns))
	if !rec.WaitFor(20*time.Second, func(b []*sink.Batch) bool { return len(b[len(b)-1].Envelope.Rows) == 2 }) {
		t.Fatal("rows not exported again once permitted")
	}
	scopeCondition(t, inv, func() []metav1.Condition { return inv.Status.Conditions }, kollectv1.ConditionDegraded, metav1.ConditionFalse, "AsExpected")
	violations(t, ns, 0)
}

// violations waits for the scope's status to count n degraded objects.
func violations(t *testing.T, ns string, n int32) {
	t.Helper()
	eventually(t, 20*time.Second, fmt.Sprintf("scope violations %d", n), func() (bool, string) {
		s := &kollectv1.KollectScope{}
		_ = cp.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "limits"}, s)
		c := apimeta.FindStatusCondition(s.Status.Conditions, kollectv1.ConditionReady)
		return s.Status.Violations == n && c != nil && c.Status == metav1.ConditionTrue, fmt.Sprintf("%+v", s.Status)
	})
}

func TestTenantModeWithoutScopeDenies(t *testing.T) {
	ns := namespace(t, "tenant")
	create(t, configMap(ns, "a", map[string]string{"color": "red"}))
	create(t, configMapInventory(ns, 200*time.Millisecond, time.Second)...)
	recs := &recorders{}
	runAgent(t, Options{AllowLocalSinks: true, Cluster: "c1", Namespaces: []string{ns}, TenantMode: true, MetricsAddr: "0", HealthAddr: "0",
		SkipNameValidation: true, Sinks: recs.factories(), CacheDir: t.TempDir(), Log: testr.New(t),
		Backoff: delivery.Backoff{Base: 100 * time.Millisecond, Max: time.Second, TerminalDelay: time.Second, BreakerThreshold: 5, BreakerCooldown: time.Second}})

	target := &kollectv1.KollectTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}}
	scopeCondition(t, target, func() []metav1.Condition { return target.Status.Conditions }, kollectv1.ConditionDegraded, metav1.ConditionTrue,
		"ScopeMissing", "tenant mode: namespace tenant has no KollectScope")
	inv := &kollectv1.KollectInventory{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "inv"}}
	scopeCondition(t, inv, func() []metav1.Condition { return inv.Status.Conditions }, kollectv1.ConditionDegraded, metav1.ConditionTrue, "ScopeMissing")
	if n := len(recs.get(ns + "/rec").Batches()); n != 0 {
		t.Fatalf("%d exports in tenant mode without a scope", n)
	}

	// A scope grants; its minimum debounce is above the inventory's, which exports at the floor.
	setScope(t, ns, func(s *kollectv1.KollectScopeSpec) {
		allowConfigMaps(ns)(s)
		s.MinDebounce = &metav1.Duration{Duration: time.Second}
	})
	if !recs.get(ns+"/rec").WaitFor(20*time.Second, func(b []*sink.Batch) bool { return len(b) > 0 && len(b[len(b)-1].Envelope.Rows) == 1 }) {
		t.Fatal("no export once a scope exists")
	}
	scopeCondition(t, inv, func() []metav1.Condition { return inv.Status.Conditions }, kollectv1.ConditionDegraded, metav1.ConditionTrue,
		"ScopeCadenceTooFast", "debounce 200ms is below the minimum 1s of KollectScope tenant/limits", "the minimum applies")
}

// TestClusterTargetRefusesATenantsProfile: a KollectClusterTarget reads every namespace with
// its profile, so a profile in a tenant's namespace (one a KollectScope governs) is refused —
// the tenant could otherwise choose what is extracted cluster-wide — while one in a namespace
// no KollectScope governs is used. A scope arriving in the profile's namespace later refuses it
// then.
func TestClusterTargetRefusesATenantsProfile(t *testing.T) {
	tenant, platform := namespace(t, "ct-tenant"), namespace(t, "ct-platform")
	setScope(t, tenant, allowConfigMaps(tenant))
	profile := func(ns string) *kollectv1.KollectProfile {
		return &kollectv1.KollectProfile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}, Spec: kollectv1.KollectProfileSpec{
			Target:     kollectv1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			Attributes: []kollectv1.Attribute{{Name: "color", JSONPath: "{.data.color}", Optional: true}},
		}}
	}
	clusterTarget := func(name, profileNS string) *kollectv1.KollectClusterTarget {
		return &kollectv1.KollectClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kollectv1.KollectClusterTargetSpec{
			ProfileRef: kollectv1.NamespacedObjectReference{Namespace: profileNS, Name: "cm"}}}
	}
	create(t, profile(tenant), profile(platform), configMap(platform, "a", map[string]string{"color": "red"}))
	byTenant, byPlatform := clusterTarget("ct-by-tenant", tenant), clusterTarget("ct-by-platform", platform)
	create(t, byTenant, byPlatform)
	t.Cleanup(func() {
		_ = cp.Client.Delete(context.Background(), byTenant)
		_ = cp.Client.Delete(context.Background(), byPlatform)
	})
	runAgent(t, Options{AllowLocalSinks: true, Cluster: "c1", Namespaces: []string{tenant, platform}, MetricsAddr: "0",
		HealthAddr: "0", SkipNameValidation: true, CacheDir: t.TempDir(), Log: testr.New(t)})

	scopeCondition(t, byTenant, func() []metav1.Condition { return byTenant.Status.Conditions }, kollectv1.ConditionReady,
		metav1.ConditionFalse, kollectv1.ReasonScopeProfileDenied, "KollectProfile ct-tenant/cm is in a tenant's namespace",
		"KollectScope ct-tenant/limits", "not permitted")
	// The positive control: the same profile in the platform's namespace is used.
	scopeCondition(t, byPlatform, func() []metav1.Condition { return byPlatform.Status.Conditions }, kollectv1.ConditionReady,
		metav1.ConditionTrue, kollectv1.ReasonWatching)
	if byTenant.Status.ObjectCount != 0 {
		t.Fatalf("the refused cluster target reports %d objects", byTenant.Status.ObjectCount)
	}

	// The platform's namespace becomes a tenant's: its profile is refused to the cluster target.
	setScope(t, platform, allowConfigMaps(platform))
	scopeCondition(t, byPlatform, func() []metav1.Condition { return byPlatform.Status.Conditions }, kollectv1.ConditionReady,
		metav1.ConditionFalse, kollectv1.ReasonScopeProfileDenied, "KollectScope ct-platform/limits")
}

// runAgent runs an agent with o against the test control plane until the test ends.
func runAgent(t *testing.T, o Options) {
	t.Helper()
	mgr, err := New(cp.Config, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}
