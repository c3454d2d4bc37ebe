package v1alpha1_test

import (
	"io/fs"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	"kollect.dev/api/crds"
	"kollect.dev/api/v1alpha1"
)

// TestKindsMatchScheme fails when a kind is registered in the scheme but missing from
// v1alpha1.Kinds, or listed there but not registered. List kinds are left out of Kinds by
// design; the options and event types metav1 adds to every group version are not ours.
func TestKindsMatchScheme(t *testing.T) {
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	ourPkg := reflect.TypeFor[v1alpha1.KindInfo]().PkgPath()
	var registered []string
	for kind, typ := range s.KnownTypes(v1alpha1.GroupVersion) {
		if typ.PkgPath() != ourPkg || strings.HasSuffix(kind, "List") {
			continue
		}
		registered = append(registered, kind)
	}
	slices.Sort(registered)

	var listed []string
	for _, k := range v1alpha1.Kinds {
		listed = append(listed, k.Kind)
		if _, ok := s.KnownTypes(v1alpha1.GroupVersion)[k.Kind+"List"]; !ok {
			t.Errorf("%s is listed but %sList is not registered", k.Kind, k.Kind)
		}
	}
	slices.Sort(listed)
	if !slices.Equal(registered, listed) {
		t.Fatalf("v1alpha1.Kinds and the scheme disagree\n registered %v\n     listed %v", registered, listed)
	}
	if len(listed) == 0 {
		t.Fatal("no kinds")
	}
}

// TestKindsMatchCRDs checks each entry's resource name and scope against its generated CRD, so
// the webhook rules built from Kinds match what the API server serves.
func TestKindsMatchCRDs(t *testing.T) {
	// controller-gen writes spec.names.kind, spec.names.plural and spec.scope at fixed
	// indentation; reading those three lines keeps this module free of a YAML dependency.
	var (
		kindRE   = regexp.MustCompile(`(?m)^    kind: (\S+)$`)
		pluralRE = regexp.MustCompile(`(?m)^    plural: (\S+)$`)
		scopeRE  = regexp.MustCompile(`(?m)^  scope: (\S+)$`)
	)
	files, err := fs.Glob(crds.FS, "*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	fromCRDs := map[string]v1alpha1.KindInfo{}
	for _, f := range files {
		raw, err := fs.ReadFile(crds.FS, f)
		if err != nil {
			t.Fatal(err)
		}
		k, p, sc := kindRE.FindSubmatch(raw), pluralRE.FindSubmatch(raw), scopeRE.FindSubmatch(raw)
		if k == nil || p == nil || sc == nil {
			t.Fatalf("%s: spec.names.kind, spec.names.plural or spec.scope not found", f)
		}
		fromCRDs[string(k[1])] = v1alpha1.KindInfo{Kind: string(k[1]), Resource: string(p[1]), Namespaced: string(sc[1]) == "Namespaced"}
	}
	for _, k := range v1alpha1.Kinds {
		if got, ok := fromCRDs[k.Kind]; !ok {
			t.Errorf("%s has no CRD", k.Kind)
		} else if got.Guardrail = k.Guardrail; got != k { // the CRD says nothing of guardrails
			t.Errorf("Kinds has %+v, the CRD says %+v", k, got)
		}
		delete(fromCRDs, k.Kind)
	}
	for kind := range fromCRDs {
		t.Errorf("the CRD of %s is not in v1alpha1.Kinds", kind)
	}
}

func TestLookupKind(t *testing.T) {
	if k, ok := v1alpha1.LookupKind("KollectClusterScope"); !ok || k.Namespaced || k.Resource != "kollectclusterscopes" {
		t.Fatalf("LookupKind(KollectClusterScope) = %+v, %v", k, ok)
	}
	if _, ok := v1alpha1.LookupKind("Deployment"); ok {
		t.Fatal("Deployment is not a Kollect kind")
	}
}
