package hubclient

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

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
	a := NewApplier(nil, Options{DefaultNamespace: "team-a"})
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
