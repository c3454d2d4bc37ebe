package hubclient

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	kollectv1 "kollect.dev/api/v1alpha1"
)

func object(apiVersion, kind, namespace, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	u.SetNamespace(namespace)
	u.SetName(name)
	return u
}

// The allowlist is kollectv1.Kinds: every Kollect kind is accepted with the scope its CRD
// declares, and nothing outside kollect.dev is.
func TestRefuseFollowsTheKindList(t *testing.T) {
	a := NewApplier(nil, Options{AllowedNamespaces: []string{"team-a"}, DefaultNamespace: "team-a", AllowScopes: true})
	for _, k := range kollectv1.Kinds {
		ns, wrongNS := "", "team-a"
		if k.Namespaced {
			ns, wrongNS = "team-a", "team-b"
		}
		if r := a.allow.Refuse(object("kollect.dev/v1alpha1", k.Kind, ns, "x")); r != "" {
			t.Errorf("%s in %q refused: %s", k.Kind, ns, r)
		}
		if r := a.allow.Refuse(object("kollect.dev/v1alpha1", k.Kind, wrongNS, "x")); r == "" {
			t.Errorf("%s in %q accepted", k.Kind, wrongNS)
		}
	}
	for _, u := range []*unstructured.Unstructured{
		object("v1", "ConfigMap", "team-a", "x"),
		object("kollect.dev/v1alpha1", "KollectThing", "team-a", "x"),
		object("kollect.dev/v1alpha1", "KollectProfileList", "team-a", "x"),
		object("example.com/v1", "KollectProfile", "team-a", "x"),
	} {
		if r := a.allow.Refuse(u); !strings.Contains(r, "is not a Kollect kind") {
			t.Errorf("%s %s: refuse = %q, want not a Kollect kind", u.GetAPIVersion(), u.GetKind(), r)
		}
	}
	// A namespaced object that names none lands in the default namespace.
	u := object("kollect.dev/v1alpha1", "KollectProfile", "", "x")
	if r := a.allow.Refuse(u); r != "" || u.GetNamespace() != "team-a" {
		t.Fatalf("refuse = %q, namespace %q", r, u.GetNamespace())
	}
}

// Guardrails (the scopes) are the cluster admin's: without --hub-allow-scopes a bundle's
// scope is refused, and the refusal says how the agent's owner would allow it.
func TestScopesFromTheHubNeedTheOwnersConsent(t *testing.T) {
	a := NewApplier(nil, Options{AllowedNamespaces: []string{"team-a"}, DefaultNamespace: "team-a"})
	for _, k := range kollectv1.Kinds {
		ns := ""
		if k.Namespaced {
			ns = "team-a"
		}
		r := a.allow.Refuse(object("kollect.dev/v1alpha1", k.Kind, ns, "x"))
		if k.Guardrail != strings.Contains(r, "--hub-allow-scopes") {
			t.Errorf("%s (guardrail %v): refuse = %q", k.Kind, k.Guardrail, r)
		}
	}
	for _, kind := range []string{"KollectScope", "KollectClusterScope"} {
		if info, _ := kollectv1.LookupKind(kind); !info.Guardrail {
			t.Errorf("%s is not marked a guardrail", kind)
		}
	}
}

// Bundles reach only the namespaces the cluster admin listed, and never the agent's own, where
// its hub credentials live: a sink placed there could name them.
func TestBundlesReachOnlyListedNamespaces(t *testing.T) {
	own := types.NamespacedName{Namespace: "kollect-system", Name: "kollect-hub-bootstrap"}
	profile := func(ns string) *unstructured.Unstructured {
		return object("kollect.dev/v1alpha1", "KollectProfile", ns, "x")
	}
	clusterTarget := object("kollect.dev/v1alpha1", "KollectClusterTarget", "", "x")
	for _, tc := range []struct {
		name       string
		namespaces []string
		admit      map[string]bool
		refusal    string
	}{
		{"none listed", nil, map[string]bool{"team-a": false, "kollect-system": false},
			"this agent accepts no namespaced objects from the hub: its owner lists the namespaces bundles may use with --hub-namespaces"},
		{"listed", []string{"team-a"}, map[string]bool{"team-a": true, "team-b": false, "kollect-system": false},
			"namespace team-b is not in the agent's allowlist (team-a)"},
		{"all", []string{"*"}, map[string]bool{"team-a": true, "team-b": true, "kollect-system": false}, ""},
		{"own listed anyway", []string{"kollect-system", "team-a"}, map[string]bool{"team-a": true, "kollect-system": false}, ""},
	} {
		a := NewApplier(nil, Options{AllowedNamespaces: tc.namespaces, BootstrapSecret: own, CredentialSecret: own})
		for ns, want := range tc.admit {
			r := a.allow.Refuse(profile(ns))
			if (r == "") != want {
				t.Errorf("%s: %s admitted = %v (refusal %q), want %v", tc.name, ns, r == "", r, want)
			}
			switch {
			case ns == "kollect-system" && !strings.Contains(r, "namespace kollect-system is the agent's own") && len(tc.namespaces) > 0:
				t.Errorf("%s: refusal in the agent's namespace = %q", tc.name, r)
			case !want && ns != "kollect-system" && tc.refusal != "" && r != tc.refusal:
				t.Errorf("%s: refusal for %s = %q, want %q", tc.name, ns, r, tc.refusal)
			}
		}
		// Cluster-scoped kinds name no namespace and are not limited by the list.
		if r := a.allow.Refuse(clusterTarget.DeepCopy()); r != "" {
			t.Errorf("%s: KollectClusterTarget refused: %s", tc.name, r)
		}
	}
}
