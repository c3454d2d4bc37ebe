package manifest

import "testing"

func TestLinesOfDocumentsListsAndJSON(t *testing.T) {
	docs, err := Parse("x.yaml", []byte(`# comment only
---
apiVersion: v1
kind: List
items:
  - apiVersion: v1
    kind: ConfigMap
    metadata: {name: a}
  - apiVersion: v1
    kind: ConfigMap
    metadata:
      name: b
    data:
      k: v
---
{"apiVersion": "v1", "kind": "Secret",
 "metadata": {"name": "c"}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != 3 {
		t.Fatalf("%d objects, want the list's two items and the JSON one", len(docs))
	}
	for i, want := range []struct {
		name  string
		line  int
		field string
		at    int
	}{{"a", 6, "metadata.name", 8}, {"b", 9, "data.k", 14}, {"c", 16, "metadata.name", 17}} {
		d := docs[i]
		if d.Object.GetName() != want.name || d.Line != want.line || d.LineOf(want.field) != want.at {
			t.Errorf("object %d: %s at %d, %s at %d; want %s at %d, %s at %d", i, d.Object.GetName(), d.Line, want.field,
				d.LineOf(want.field), want.name, want.line, want.field, want.at)
		}
	}
	// A path beyond the file stops at the deepest part present.
	if got := docs[1].LineOf("data.k.deeper[3]"); got != 14 {
		t.Errorf("deep path: line %d", got)
	}
	if _, err := Parse("bad.yaml", []byte("a: [")); err == nil {
		t.Error("broken YAML accepted")
	}
}
