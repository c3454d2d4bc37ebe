package backends

import (
	"encoding/json"
	"io/fs"
	"maps"
	"slices"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"kollect.dev/agent/internal/sink"
	"kollect.dev/api/crds"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// sinkKinds are the CRDs whose spec.type enum lists the backends of a family.
var sinkKinds = map[string]kollectv1.SinkFamily{
	"KollectSnapshotSink": kollectv1.SinkFamilySnapshot,
	"KollectDatabaseSink": kollectv1.SinkFamilyDatabase,
	"KollectEventSink":    kollectv1.SinkFamilyEvent,
}

// crdSinkTypes reads the shipped CRDs (api/crds/*.yaml) and returns sink.Key of every value
// of the sink kinds' spec.type enums, in every served version.
func crdSinkTypes(t *testing.T) map[string]bool {
	t.Helper()
	files, err := fs.Glob(crds.FS, "*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	keys, seen := map[string]bool{}, map[string]bool{}
	for _, name := range files {
		raw, err := fs.ReadFile(crds.FS, name)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(raw, &crd); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		family, ok := sinkKinds[crd.Spec.Names.Kind]
		if !ok {
			continue
		}
		seen[crd.Spec.Names.Kind] = true
		for _, v := range crd.Spec.Versions {
			if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
				t.Fatalf("%s %s: no schema", name, v.Name)
			}
			enum := v.Schema.OpenAPIV3Schema.Properties["spec"].Properties["type"].Enum
			if len(enum) == 0 {
				t.Fatalf("%s %s: spec.type has no enum", name, v.Name)
			}
			for _, e := range enum {
				var typ string
				if err := json.Unmarshal(e.Raw, &typ); err != nil {
					t.Fatalf("%s %s: spec.type enum value %s: %v", name, v.Name, e.Raw, err)
				}
				keys[sink.Key(family, typ)] = true
			}
		}
	}
	for kind := range sinkKinds {
		if !seen[kind] {
			t.Fatalf("no CRD for %s in api/crds", kind)
		}
	}
	return keys
}

// TestTableMatchesCRDEnums fails when a sink type the API accepts has no backend in the
// production table (the agent would report UnsupportedType for a valid object), or when the
// table holds a backend no CRD lets anyone configure.
func TestTableMatchesCRDEnums(t *testing.T) {
	want := crdSinkTypes(t)
	got := Factories(nil)
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if got[k] == nil {
			t.Errorf("the CRDs allow sink type %s, but the table has no backend for it", k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if !want[k] {
			t.Errorf("the table has a backend for %s, which no CRD's spec.type enum allows", k)
		}
	}
}
