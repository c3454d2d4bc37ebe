package profile

import (
	"encoding/json"
	"testing"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// FuzzCompileAndExtract compiles a profile from arbitrary CEL and JSONPath attributes and,
// when it compiles, extracts from an arbitrary JSON object: compile errors and extraction
// errors are errors with a message, never panics; an attribute that compiles to "metadata
// only" must extract the same from the object and from its metadata alone. The seeds run with
// every `go test`.
func FuzzCompileAndExtract(f *testing.F) {
	obj := `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"shop","labels":{"a.b/c":"d"}},"spec":{"replicas":3,"template":{"spec":{"containers":[{"image":"nginx"}]}}},"status":{"readyReplicas":2}}`
	for _, s := range [][3]string{
		{"object.metadata.name", "{.spec.replicas}", obj},
		{`object["spec"]["replicas"]`, "{@}", obj},
		{"object", "{['spec']}", obj},
		{"has(object.spec) ? object.spec.replicas : 0", "{.metadata.labels['a\\.b/c']}", obj},
		{"object.?spec.replicas.orValue(0)", "{.spec.template.spec.containers[*].image}", obj},
		{"object.spec.template.spec.containers.map(c, c.image)", "{range .items[*]}{.x}{end}", obj},
		{"object.metadata.labels.all(k, k.startsWith('a'))", "{.a..b}", `{"metadata":{}}`},
		{"1/0", "{.x[-1]}", `{"x":[]}`},
		{"'x' * 1000000", "{", `[]`},
		{"))", "}", `null`},
		{"object.metadata.name + object['spec']['x']", "{.status}", `{"metadata":{"name":1},"spec":{"x":"y"}}`},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, cel, jsonPath, raw string) {
		p := &kollectv1.KollectProfile{Spec: kollectv1.KollectProfileSpec{
			Target: kollectv1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
			Attributes: []kollectv1.Attribute{
				{Name: "c", CEL: cel, Optional: true},
				{Name: "j", JSONPath: jsonPath, Optional: true},
			},
		}}
		c, err := Compile(p)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("a compile error without a message")
			}
			return
		}
		var o map[string]any
		if json.Unmarshal([]byte(raw), &o) != nil || o == nil {
			return
		}
		full, fullErr := c.ExtractJSON(o)
		if fullErr != nil && fullErr.Error() == "" {
			t.Fatal("an extraction error without a message")
		}
		if !c.MetadataOnly {
			return
		}
		// What a metadata-only watch delivers: the object's identity and metadata.
		meta := map[string]any{}
		for _, k := range []string{"apiVersion", "kind", "metadata"} {
			if v, ok := o[k]; ok {
				meta[k] = v
			}
		}
		part, partErr := c.ExtractJSON(meta)
		if (fullErr == nil) != (partErr == nil) || string(full) != string(part) {
			t.Fatalf("profile judged metadata-only (cel %q, jsonPath %q) extracts %s (%v) from the object but %s (%v) from its metadata",
				cel, jsonPath, full, fullErr, part, partErr)
		}
	})
}
