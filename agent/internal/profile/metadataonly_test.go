package profile

import (
	"testing"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// TestMetadataOnlyFromCompiledExpressions is the table of issue 18 point 1: a profile gets a
// metadata-only watch only when every attribute provably reads under object.metadata, decided
// from the checked CEL AST and the parsed JSONPath, never from the text.
func TestMetadataOnlyFromCompiledExpressions(t *testing.T) {
	cases := []struct {
		name     string
		cel      string
		jsonPath string
		metadata bool
	}{
		// CEL: metadata only.
		{name: "select chain", cel: "object.metadata.name", metadata: true},
		{name: "concatenation", cel: "object.metadata.name + '-' + object.metadata.namespace", metadata: true},
		{name: "string index", cel: `object["metadata"]["name"]`, metadata: true},
		{name: "dotted label key", cel: "object.metadata.labels['a.b/c']", metadata: true},
		{name: "has under metadata", cel: "has(object.metadata.labels)", metadata: true},
		{name: "optional under metadata", cel: "object.?metadata.?labels.orValue({})", metadata: true},
		{name: "macro over labels", cel: "object.metadata.labels.all(k, k.startsWith('app'))", metadata: true},
		{name: "map over owners", cel: "object.metadata.ownerReferences.map(o, o.kind)", metadata: true},
		{name: "member function", cel: "object.metadata.name.upperAscii()", metadata: true},
		{name: "integer index under metadata", cel: "object.metadata.ownerReferences[0].name", metadata: true},
		{name: "metadata key from metadata", cel: "object.metadata.labels[object.metadata.name]", metadata: true},
		{name: "literal", cel: "'constant'", metadata: true},
		// CEL: full watch.
		{name: "string index spec", cel: `object["spec"]["replicas"]`},
		{name: "bare object", cel: "object"},
		{name: "metadata plus spec index", cel: "object.metadata.name + object['spec']['x']"},
		{name: "has spec", cel: "has(object.spec)"},
		{name: "optional spec", cel: "object.?spec.orValue({})"},
		{name: "optional spec chain", cel: "object.?spec.?replicas.orValue(0)"},
		{name: "macro over object", cel: "object.exists(k, k == 'spec')"},
		{name: "comprehension over object", cel: "object.map(k, k)"},
		{name: "object in a comprehension body", cel: "object.metadata.labels.all(k, k in object.spec)"},
		{name: "dotted root key", cel: "object['metadata.x']"},
		{name: "dynamic root index", cel: "object[object.metadata.name]"},
		{name: "dynamic key from spec", cel: "object.metadata.labels[object.spec.key]"},
		{name: "object as argument", cel: "string(object)"},
		{name: "object in a list", cel: "[object][0].metadata.name"},
		{name: "object in a map", cel: "{'m': object}.m.metadata.name"},
		{name: "status", cel: "object.status.readyReplicas"},
		{name: "kind", cel: "object.kind"},
		{name: "size of object", cel: "size(object)"},
		// JSONPath: metadata only.
		{name: "jsonpath field chain", jsonPath: "{.metadata.labels.team}", metadata: true},
		{name: "jsonpath without braces", jsonPath: ".metadata.name", metadata: true},
		{name: "jsonpath dollar", jsonPath: "{$.metadata.name}", metadata: true},
		{name: "jsonpath bracket under metadata", jsonPath: "{.metadata.labels['a.b/c']}", metadata: true},
		{name: "jsonpath filter under metadata", jsonPath: `{.metadata.ownerReferences[?(@.kind=="ReplicaSet")].name}`, metadata: true},
		{name: "jsonpath recursive under metadata", jsonPath: "{.metadata..name}", metadata: true},
		// JSONPath: full watch.
		{name: "jsonpath current", jsonPath: "{@}"},
		{name: "jsonpath root", jsonPath: "{$}"},
		{name: "jsonpath bracket spec", jsonPath: "{['spec']}"},
		{name: "jsonpath spec", jsonPath: "{.spec.replicas}"},
		{name: "jsonpath recursive", jsonPath: "{..name}"},
		{name: "jsonpath wildcard", jsonPath: "{.*}"},
		{name: "jsonpath array wildcard", jsonPath: "{[*]}"},
		{name: "jsonpath range", jsonPath: "{range .spec.items[*]}{.metadata.name}{end}"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := kollectv1.Attribute{Name: "a", CEL: c.cel, JSONPath: c.jsonPath, Optional: true}
			comp, err := Compile(profileOf(a))
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			if comp.MetadataOnly != c.metadata {
				t.Fatalf("cel %q jsonPath %q: MetadataOnly = %v, want %v", c.cel, c.jsonPath, comp.MetadataOnly, c.metadata)
			}
		})
	}
	// One full-watch attribute among metadata ones makes the whole profile a full watch.
	comp, err := Compile(profileOf(
		kollectv1.Attribute{Name: "n", CEL: "object.metadata.name"},
		kollectv1.Attribute{Name: "r", CEL: `object["spec"]["replicas"]`},
	))
	if err != nil || comp.MetadataOnly {
		t.Fatalf("mixed profile: MetadataOnly %v, err %v", comp != nil && comp.MetadataOnly, err)
	}
}
