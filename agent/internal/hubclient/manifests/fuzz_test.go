package manifests

import (
	"encoding/json"
	"slices"
	"testing"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// fuzzOwn is the agent's namespace in the fuzzed allowlists.
const fuzzOwn = "kollect-system"

// fuzzAllowlists are the allowlists an agent's owner can set: a list of namespaces or "*",
// scopes allowed or not, a default namespace that is listed, unlisted, or the agent's own.
var fuzzAllowlists = []Allowlist{
	{Namespaces: []string{"team-a", "team-b"}, DefaultNamespace: "team-a", Own: fuzzOwn},
	{Namespaces: []string{AllNamespaces}, DefaultNamespace: "team-a", Own: fuzzOwn, Guardrails: true},
	{Namespaces: []string{AllNamespaces, fuzzOwn}, DefaultNamespace: fuzzOwn, Own: fuzzOwn},
	{Namespaces: []string{"team-a"}, DefaultNamespace: "elsewhere", Own: fuzzOwn, Guardrails: true},
	{Own: fuzzOwn, DefaultNamespace: "team-a"},
}

// FuzzAdmittedObjects decodes bundle manifests as a hub (or whoever holds its stream) may send
// them, to the applier and to previews, and checks each object the allowlist admits as it
// will be written: a kollect.dev kind; a guardrail kind only where the owner allowed scopes;
// named; cluster-scoped without a namespace, or namespaced in a listed namespace (or any
// under "*") and never the agent's own, where its hub credentials live.
func FuzzAdmittedObjects(f *testing.F) {
	for _, s := range []string{
		"apiVersion: kollect.dev/v1alpha1\nkind: KollectProfile\nmetadata: {name: p}\n---\n" +
			"apiVersion: kollect.dev/v1alpha1\nkind: KollectEventSink\nmetadata: {name: s, namespace: kollect-system}\n",
		"apiVersion: kollect.dev/v1alpha1\nkind: KollectClusterScope\nmetadata: {name: platform, namespace: team-a}\n",
		"apiVersion: kollect.dev/v1alpha1\nkind: KollectScope\nmetadata: {name: limits, namespace: team-b}\n",
		"apiVersion: kollect.dev/v1alpha1\nkind: KollectClusterInventory\nmetadata: {name: all}\n",
		`{"apiVersion":"kollect.dev/v1alpha1","kind":"KollectTarget","metadata":{"name":"t","namespace":7}}`,
		`{"apiVersion":"kollect.dev/v1alpha1","kind":"KollectTarget","metadata":{"name":"t","namespace":"Kollect-System"}}`,
		"apiVersion: v1\nkind: Secret\nmetadata: {name: creds, namespace: team-a}\n",
		"apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: x}\n",
		"apiVersion: kollect.dev.evil.example/v1\nkind: KollectProfile\nmetadata: {name: p, namespace: team-a}\n",
		"apiVersion: kollect.dev/v1alpha1\nkind: kollectprofile\nmetadata: {name: p, namespace: team-a}\n",
		"apiVersion: kollect.dev/v1alpha1\nkind: KollectProfile\nmetadata: {generateName: p-, namespace: team-a}\n",
		"apiVersion: kollect.dev/v1alpha1\nkind: KollectProfile\nmetadata: &m {name: p, namespace: team-a}\n---\n" +
			"apiVersion: kollect.dev/v1alpha1\nkind: KollectProfile\nmetadata: *m\n",
		"a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n",
		"apiVersion: kollect.dev/v1alpha1\nkind: KollectProfile\nmetadata:\n  name: p\n  namespace: team-a\n  namespace: kollect-system\n",
		"---\n---\n", "[", "\t:", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, yaml string) {
		objs, err := Decode(yaml)
		if err != nil {
			return
		}
		for _, a := range fuzzAllowlists {
			for _, obj := range objs {
				u := obj.DeepCopy()
				if a.Refuse(u) != "" {
					continue
				}
				// What the applier writes is the object's JSON: judge that, not the
				// accessors Refuse read.
				raw, err := json.Marshal(u.Object)
				if err != nil {
					t.Fatalf("an admitted object does not marshal: %v", err)
				}
				var w struct {
					APIVersion string `json:"apiVersion"`
					Kind       string `json:"kind"`
					Metadata   struct {
						Name      string `json:"name"`
						Namespace string `json:"namespace"`
					} `json:"metadata"`
				}
				if err := json.Unmarshal(raw, &w); err != nil {
					continue // a field of the wrong type: the API server refuses the object
				}
				info, ok := kollectv1.LookupKind(w.Kind)
				switch {
				case u.GroupVersionKind().Group != kollectv1.GroupVersion.Group || !ok:
					t.Fatalf("admitted a kind that is not Kollect's: %s", raw)
				case info.Guardrail && !a.Guardrails:
					t.Fatalf("admitted a guardrail with scopes not allowed: %s", raw)
				case w.Metadata.Name == "":
					t.Fatalf("admitted an object without a name: %s", raw)
				case !info.Namespaced && w.Metadata.Namespace != "":
					t.Fatalf("admitted a cluster-scoped object with a namespace: %s", raw)
				case !info.Namespaced:
				case w.Metadata.Namespace == "" || w.Metadata.Namespace == a.Own:
					t.Fatalf("admitted into namespace %q (the agent's is %s): %s", w.Metadata.Namespace, a.Own, raw)
				case !slices.Contains(a.Namespaces, AllNamespaces) && !slices.Contains(a.Namespaces, w.Metadata.Namespace):
					t.Fatalf("admitted into unlisted namespace %q under %v: %s", w.Metadata.Namespace, a.Namespaces, raw)
				}
			}
		}
	})
}
