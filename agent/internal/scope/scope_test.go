package scope

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kollectv1 "kollect.dev/api/v1alpha1"
)

func nsScope(ns, name string, spec kollectv1.KollectScopeSpec) kollectv1.KollectScope {
	return kollectv1.KollectScope{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
}

func clusterScope(name string, sel *metav1.LabelSelector, spec kollectv1.KollectScopeSpec) kollectv1.KollectClusterScope {
	return kollectv1.KollectClusterScope{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: kollectv1.KollectClusterScopeSpec{KollectScopeSpec: spec, NamespaceSelector: sel}}
}

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

var (
	deployments = schema.GroupKind{Group: "apps", Kind: "Deployment"}
	configMaps  = schema.GroupKind{Kind: "ConfigMap"}
	appsAll     = kollectv1.GroupKindRule{Group: "apps", Kind: "*"}
	cmRule      = kollectv1.GroupKindRule{Kind: "ConfigMap"}
)

func TestKind(t *testing.T) {
	tests := []struct {
		name   string
		set    Set
		gk     schema.GroupKind
		reason string // "" when allowed
		msg    string
	}{
		{name: "no scope, not tenant mode", set: Set{}, gk: deployments},
		{name: "no scope, tenant mode", set: Set{TenantMode: true}, gk: deployments, reason: kollectv1.ReasonScopeMissing,
			msg: "tenant mode: namespace team-a has no KollectScope, so nothing is allowed"},
		{name: "kind allowed by group wildcard",
			set: Set{Scopes: []kollectv1.KollectScope{nsScope("team-a", "s", kollectv1.KollectScopeSpec{AllowedKinds: []kollectv1.GroupKindRule{appsAll}})}},
			gk:  deployments},
		{name: "empty allowlist denies",
			set: Set{Scopes: []kollectv1.KollectScope{nsScope("team-a", "s", kollectv1.KollectScopeSpec{})}},
			gk:  configMaps, reason: kollectv1.ReasonScopeKindDenied, msg: "KollectScope team-a/s does not allow core/ConfigMap"},
		{name: "scope of another namespace does not apply",
			set: Set{Scopes: []kollectv1.KollectScope{nsScope("team-b", "s", kollectv1.KollectScopeSpec{})}},
			gk:  configMaps},
		{name: "intersection: second scope denies, named",
			set: Set{Scopes: []kollectv1.KollectScope{
				nsScope("team-a", "z-narrow", kollectv1.KollectScopeSpec{AllowedKinds: []kollectv1.GroupKindRule{cmRule}}),
				nsScope("team-a", "a-wide", kollectv1.KollectScopeSpec{AllowedKinds: []kollectv1.GroupKindRule{{Group: "*", Kind: "*"}}}),
			}},
			gk: deployments, reason: kollectv1.ReasonScopeKindDenied, msg: "KollectScope team-a/z-narrow does not allow apps/Deployment"},
		{name: "cluster ceiling denies even when the namespace scope allows",
			set: Set{Scopes: []kollectv1.KollectScope{nsScope("team-a", "s", kollectv1.KollectScopeSpec{AllowedKinds: []kollectv1.GroupKindRule{appsAll}})},
				ClusterScopes: []kollectv1.KollectClusterScope{clusterScope("platform", nil, kollectv1.KollectScopeSpec{AllowedKinds: []kollectv1.GroupKindRule{cmRule}})}},
			gk: deployments, reason: kollectv1.ReasonScopeKindDenied, msg: "KollectClusterScope platform does not allow apps/Deployment"},
		{name: "cluster ceiling not selecting the namespace does not apply",
			set: Set{ClusterScopes: []kollectv1.KollectClusterScope{clusterScope("platform",
				&metav1.LabelSelector{MatchLabels: map[string]string{"tier": "prod"}}, kollectv1.KollectScopeSpec{})}},
			gk: deployments},
		{name: "tenant mode: a cluster ceiling alone does not grant",
			set: Set{TenantMode: true, ClusterScopes: []kollectv1.KollectClusterScope{clusterScope("platform", nil,
				kollectv1.KollectScopeSpec{AllowedKinds: []kollectv1.GroupKindRule{appsAll}})}},
			gk: deployments, reason: kollectv1.ReasonScopeMissing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.set.ForNamespace("team-a", labels.Set{"team": "a"}).Kind(tt.gk)
			if tt.reason == "" {
				if !d.Allowed {
					t.Fatalf("denied: %s", d)
				}
				return
			}
			if d.Allowed || d.Reason != tt.reason {
				t.Fatalf("got %s, want reason %s", d, tt.reason)
			}
			if tt.msg != "" && d.Message != tt.msg {
				t.Fatalf("message %q, want %q", d.Message, tt.msg)
			}
		})
	}
}

func TestIntersectionIsOrderIndependent(t *testing.T) {
	a := nsScope("ns", "a", kollectv1.KollectScopeSpec{AllowedKinds: []kollectv1.GroupKindRule{cmRule}})
	b := nsScope("ns", "b", kollectv1.KollectScopeSpec{AllowedKinds: []kollectv1.GroupKindRule{appsAll}})
	d1 := Set{Scopes: []kollectv1.KollectScope{a, b}}.ForNamespace("ns", nil).Kind(configMaps)
	d2 := Set{Scopes: []kollectv1.KollectScope{b, a}}.ForNamespace("ns", nil).Kind(configMaps)
	if d1 != d2 || d1.Message != "KollectScope ns/b does not allow core/ConfigMap" {
		t.Fatalf("order changed the decision: %s vs %s", d1, d2)
	}
}

func TestNamespaces(t *testing.T) {
	spec := func(ns ...string) Set {
		return Set{Scopes: []kollectv1.KollectScope{nsScope("team-a", "s", kollectv1.KollectScopeSpec{AllowedKinds: []kollectv1.GroupKindRule{appsAll}, AllowedNamespaces: ns})}}
	}
	tests := []struct {
		name    string
		set     Set
		own     string
		sel     kollectv1.TargetSelection
		allowed bool
	}{
		{name: "own namespace by default", set: spec("team-a"), own: "team-a", allowed: true},
		{name: "empty allowlist denies the own namespace", set: spec(), own: "team-a"},
		{name: "include covered by glob", set: spec("team-*"), own: "team-a",
			sel: kollectv1.TargetSelection{Namespaces: &kollectv1.NamespaceSelection{Include: []string{"team-b", "team-c"}}}, allowed: true},
		{name: "include outside", set: spec("team-*"), own: "team-a",
			sel: kollectv1.TargetSelection{Namespaces: &kollectv1.NamespaceSelection{Include: []string{"team-b", "kube-system"}}}},
		{name: "glob include covered by a prefix glob", set: spec("team-*"), own: "team-a",
			sel: kollectv1.TargetSelection{Namespaces: &kollectv1.NamespaceSelection{Include: []string{"team-a-*"}}}, allowed: true},
		{name: "glob include not covered by a narrower pattern", set: spec("team-a"), own: "team-a",
			sel: kollectv1.TargetSelection{Namespaces: &kollectv1.NamespaceSelection{Include: []string{"team-*"}}}},
		{name: "label selector reaches everything", set: spec("team-*"), own: "team-a",
			sel: kollectv1.TargetSelection{Namespaces: &kollectv1.NamespaceSelection{Selector: &metav1.LabelSelector{}}}},
		{name: "label selector with star", set: spec("*"), own: "team-a",
			sel: kollectv1.TargetSelection{Namespaces: &kollectv1.NamespaceSelection{Selector: &metav1.LabelSelector{}}}, allowed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.set.ForNamespace("team-a", nil).Target(deployments, true, TargetReach(tt.own, tt.sel))
			if d.Allowed != tt.allowed {
				t.Fatalf("got %s, want allowed=%v", d, tt.allowed)
			}
			if !d.Allowed && d.Reason != kollectv1.ReasonScopeNamespaceDenied {
				t.Fatalf("reason %s", d.Reason)
			}
		})
	}
	// Without any scope a KollectTarget is confined to its own namespace.
	for _, c := range []struct {
		sel     kollectv1.TargetSelection
		allowed bool
	}{
		{allowed: true},
		{sel: kollectv1.TargetSelection{Namespaces: &kollectv1.NamespaceSelection{Include: []string{"team-a"}}}, allowed: true},
		{sel: kollectv1.TargetSelection{Namespaces: &kollectv1.NamespaceSelection{Include: []string{"team-a", "team-b"}}}},
		{sel: kollectv1.TargetSelection{Namespaces: &kollectv1.NamespaceSelection{Include: []string{"team-*"}}}},
		{sel: kollectv1.TargetSelection{Namespaces: &kollectv1.NamespaceSelection{Selector: &metav1.LabelSelector{}}}},
	} {
		d := (Set{}).ForNamespace("team-a", nil).Target(deployments, true, TargetReach("team-a", c.sel))
		if d.Allowed != c.allowed || (!d.Allowed && (d.Reason != kollectv1.ReasonScopeNamespaceDenied ||
			!strings.Contains(d.Message, "a KollectTarget collects only from its own namespace team-a unless a KollectScope or KollectClusterScope allows more"))) {
			t.Errorf("no scope, selection %+v: %s, want allowed=%v", c.sel.Namespaces, d, c.allowed)
		}
	}
	// A cluster ceiling that allows more grants it.
	ceiling := Set{ClusterScopes: []kollectv1.KollectClusterScope{clusterScope("platform", nil, kollectv1.KollectScopeSpec{
		AllowedKinds: []kollectv1.GroupKindRule{appsAll}, AllowedNamespaces: []string{"team-*"}})}}
	if d := ceiling.ForNamespace("team-a", nil).Target(deployments, true, TargetReach("team-a",
		kollectv1.TargetSelection{Namespaces: &kollectv1.NamespaceSelection{Include: []string{"team-b"}}})); !d.Allowed {
		t.Errorf("a KollectClusterScope allowing team-* did not grant team-b: %s", d)
	}
	// Cluster-scoped kinds reach no namespace.
	if d := spec().ForNamespace("team-a", nil).Namespaces(Reach{All: true}); d.Allowed {
		t.Fatal("reach of every namespace allowed by an empty allowlist")
	}
}

func TestSinksAndCadence(t *testing.T) {
	set := Set{Scopes: []kollectv1.KollectScope{nsScope("team-a", "s", kollectv1.KollectScopeSpec{
		AllowedSinks:      []kollectv1.SinkRule{{Family: "snapshot", Names: []string{"git-*"}}, {Family: "event"}},
		MinDebounce:       dur(10 * time.Second),
		MinResyncInterval: dur(time.Hour),
	})}, ClusterScopes: []kollectv1.KollectClusterScope{clusterScope("platform", nil, kollectv1.KollectScopeSpec{
		AllowedSinks: []kollectv1.SinkRule{{Family: "*"}}, MinDebounce: dur(30 * time.Second),
	})}}
	r := set.ForNamespace("team-a", nil)
	tests := []struct {
		name   string
		sinks  []SinkRef
		timing kollectv1.ExportTiming
		reason string
		msg    string
	}{
		{name: "ok", sinks: []SinkRef{{Family: "snapshot", Name: "git-main"}, {Family: "event", Name: "anything"}},
			timing: kollectv1.ExportTiming{Debounce: metav1.Duration{Duration: time.Minute}}},
		{name: "name outside the glob", sinks: []SinkRef{{Family: "snapshot", Name: "s3-main"}},
			timing: kollectv1.ExportTiming{Debounce: metav1.Duration{Duration: time.Minute}},
			reason: kollectv1.ReasonScopeSinkDenied, msg: "KollectScope team-a/s does not allow snapshot sink s3-main"},
		{name: "family not listed", sinks: []SinkRef{{Family: "database", Name: "pg"}},
			reason: kollectv1.ReasonScopeSinkDenied, msg: "KollectScope team-a/s does not allow database sink pg"},
		{name: "largest minimum wins", timing: kollectv1.ExportTiming{Debounce: metav1.Duration{Duration: 20 * time.Second}},
			reason: kollectv1.ReasonScopeCadenceTooFast, msg: "debounce 20s is below the minimum 30s of KollectClusterScope platform"},
		{name: "maxDelay below the minimum debounce", timing: kollectv1.ExportTiming{Debounce: metav1.Duration{Duration: time.Minute},
			MaxDelay: metav1.Duration{Duration: 20 * time.Second}},
			reason: kollectv1.ReasonScopeCadenceTooFast, msg: "maxDelay 20s is below the minimum debounce 30s of KollectClusterScope platform"},
		{name: "resync too fast", timing: kollectv1.ExportTiming{Debounce: metav1.Duration{Duration: time.Minute}, ResyncInterval: dur(time.Minute)},
			reason: kollectv1.ReasonScopeCadenceTooFast, msg: "resyncInterval 1m0s is below the minimum 1h0m0s of KollectScope team-a/s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := r.Inventory(tt.sinks, tt.timing)
			if tt.reason == "" {
				if !d.Allowed {
					t.Fatalf("denied: %s", d)
				}
				return
			}
			if d.Allowed || d.Reason != tt.reason || d.Message != tt.msg {
				t.Fatalf("got %s, want %s: %s", d, tt.reason, tt.msg)
			}
		})
	}
}

func TestClusterObjects(t *testing.T) {
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "prod"}}
	set := Set{ClusterScopes: []kollectv1.KollectClusterScope{clusterScope("platform", sel, kollectv1.KollectScopeSpec{
		AllowedKinds:      []kollectv1.GroupKindRule{appsAll},
		AllowedNamespaces: []string{"prod-*"},
		AllowedSinks:      []kollectv1.SinkRule{{Family: "database", Names: []string{"platform/*"}}},
	})}}
	r := set.ForCluster()
	if d := r.Target(deployments, true, Reach{Patterns: []string{"prod-eu"}}); !d.Allowed {
		t.Fatalf("cluster target denied: %s", d)
	}
	if d := r.Target(deployments, true, Reach{All: true}); d.Reason != kollectv1.ReasonScopeNamespaceDenied {
		t.Fatalf("cluster target reaching every namespace: %s", d)
	}
	if d := r.Sink(SinkRef{Family: "database", Namespace: "platform", Name: "pg"}); !d.Allowed {
		t.Fatalf("namespace/name glob: %s", d)
	}
	if d := r.Sink(SinkRef{Family: "database", Namespace: "team-a", Name: "pg"}); d.Allowed {
		t.Fatal("sink of another namespace allowed")
	}
	if d := (Set{TenantMode: true}).ForCluster().Target(deployments, true, Reach{All: true}); !d.Allowed {
		t.Fatalf("tenant mode governs tenants; a cluster target without a cluster scope: %s", d)
	}
	if !(Set{}).ForCluster().Unrestricted() {
		t.Fatal("no scope must be unrestricted")
	}
}

func TestSinkCredentialsOnlyClusterScopesGrant(t *testing.T) {
	tenant := labels.Set{"tenant": "true"}
	platform := func(name string, ambient, insecure bool) kollectv1.KollectClusterScope {
		cs := clusterScope(name, &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "true"}}, kollectv1.KollectScopeSpec{})
		cs.Spec.AllowAmbientCredentials, cs.Spec.AllowInsecureSkipVerify = ambient, insecure
		return cs
	}
	ambient := []string{"spec.s3.secretRef"}
	insecure := []string{"spec.kafka.tls.insecureSkipVerify set: the sink would not verify its server's certificate"}
	tests := []struct {
		name              string
		set               Set
		ambient, insecure []string
		msg               string // "" when allowed
	}{
		{name: "a secretRef and verified TLS need nothing", set: Set{}},
		{name: "no cluster scope: ambient refused", set: Set{}, ambient: ambient,
			msg: "spec.s3.secretRef unset: the sink would authenticate as the agent itself, and no KollectClusterScope with allowAmbientCredentials selects the namespace"},
		{name: "a KollectScope cannot grant", set: Set{TenantMode: true, Scopes: []kollectv1.KollectScope{nsScope("team-a", "own", kollectv1.KollectScopeSpec{})}},
			insecure: insecure,
			msg:      "spec.kafka.tls.insecureSkipVerify set: the sink would not verify its server's certificate, and no KollectClusterScope with allowInsecureSkipVerify selects the namespace"},
		{name: "the cluster scope allows", set: Set{ClusterScopes: []kollectv1.KollectClusterScope{platform("p", true, true)}}, ambient: ambient, insecure: insecure},
		{name: "every selecting cluster scope must allow",
			set:     Set{ClusterScopes: []kollectv1.KollectClusterScope{platform("a-open", true, false), platform("b-strict", false, false)}},
			ambient: ambient,
			msg:     "spec.s3.secretRef unset: the sink would authenticate as the agent itself, and KollectClusterScope b-strict does not set allowAmbientCredentials"},
		{name: "allowing ambient is not allowing insecure", set: Set{ClusterScopes: []kollectv1.KollectClusterScope{platform("p", true, false)}},
			ambient: ambient, insecure: insecure,
			msg: "spec.kafka.tls.insecureSkipVerify set: the sink would not verify its server's certificate, and KollectClusterScope p does not set allowInsecureSkipVerify"},
		{name: "every unverified setting is named", set: Set{},
			insecure: []string{"spec.postgres.sslMode disable: the sink would send its credentials and rows in plaintext, to a server it does not verify",
				"spec.postgres.tls.insecureSkipVerify set: the sink would not verify its server's certificate"},
			msg: "spec.postgres.sslMode disable: the sink would send its credentials and rows in plaintext, to a server it does not verify; " +
				"spec.postgres.tls.insecureSkipVerify set: the sink would not verify its server's certificate, and no KollectClusterScope with allowInsecureSkipVerify selects the namespace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.set.ForNamespace("team-a", tenant).SinkCredentials(tt.ambient, tt.insecure)
			if tt.msg == "" {
				if !d.Allowed {
					t.Fatalf("denied: %s", d)
				}
				return
			}
			if d.Allowed || d.Reason != kollectv1.ReasonScopeCredentialsDenied || d.Message != tt.msg {
				t.Fatalf("decision = %s, want %s: %s", d, kollectv1.ReasonScopeCredentialsDenied, tt.msg)
			}
		})
	}
}
