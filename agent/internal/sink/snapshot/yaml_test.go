package snapshot

import (
	"bytes"
	"encoding/json"
	"testing"

	"go.yaml.in/yaml/v3"

	"kollect.dev/agent/internal/export"
)

// TestYAMLReadsBackExactly decodes the emitted YAML with an independent YAML library and
// compares every value, including strings a YAML reader could take for something else.
func TestYAMLReadsBackExactly(t *testing.T) {
	tricky := []string{"", "true", "No", "off", "y", "null", "~", "1.0", "0x1F", "1:20", "2024-01-01", "-x", "- x",
		"a: b", "a:b", "x #c", "#c", "@at", "`t", "'q'", "\"dq\"", "multi\nline", "tab\there", " lead", "trail ",
		"ünïcode", "&anchor", "*alias", "!tag", "%pct", "{a}", "[a]", "a,b", "?q", "|", ">", "registry.example/app:1.2",
		"<<", "=", "a\\b", "\u2028", "12345678901234567890"}
	values := map[string]any{"nested": map[string]any{"list": []any{1, "two", true, nil, map[string]any{"k": "v: w"}, []any{}}, "empty": map[string]any{}},
		"float": 0.5, "big": 1e21, "neg": -3, "nil": nil, "emptyList": []any{}}
	for i, s := range tricky {
		values[string(rune('a'+i%26))+s] = s
	}
	raw, err := export.EncodeAttributes(values)
	if err != nil {
		t.Fatal(err)
	}
	r := export.Row{Origin: &export.Origin{Cluster: "c", Inventory: "true", Target: "1", Group: "", Version: "v1", Kind: "K"}, Namespace: "no", Name: "0x10", UID: "- u", Attributes: raw}
	data, err := encodeYAML("yes", "inv: x", DocumentChecksum([]*export.Row{&r}), []*export.Row{&r})
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if doc["cluster"] != "yes" || doc["inventory"] != "inv: x" || doc["itemCount"] != 1 {
		t.Fatalf("header %v", doc)
	}
	got := doc["rows"].([]any)[0].(map[string]any)
	for k, want := range map[string]string{"cluster": "c", "inventory": "true", "target": "1", "group": "", "version": "v1",
		"kind": "K", "namespace": "no", "name": "0x10", "uid": "- u"} {
		if got[k] != want {
			t.Errorf("%s = %#v, want %q", k, got[k], want)
		}
	}
	gotJSON, _ := json.Marshal(got["attributes"])
	wantJSON, _ := export.EncodeAttributes(values)
	var a, b any
	_ = json.Unmarshal(gotJSON, &a)
	_ = json.Unmarshal(wantJSON, &b)
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Errorf("attributes read back as\n%s\nwant\n%s\nYAML:\n%s", ja, jb, data)
	}
}

// TestYAMLFastPathMatchesGeneralPath renders attributes both ways and requires identical
// bytes, and checks that non-canonical JSON falls back to the general path.
func TestYAMLFastPathMatchesGeneralPath(t *testing.T) {
	for _, attrs := range []map[string]any{
		{}, {"a": 1}, {"s": "x: y", "n": -1.5e3, "b": false, "z": nil},
		{"nested": map[string]any{"list": []any{1, "two", map[string]any{"k": "v"}, []any{1, []any{}}}, "e": map[string]any{}, "l": []any{}}},
		{"esc": "quote\" and \\ and \u00e9 and \n", "plain": "registry.example/app:1.2", "num": "007"},
	} {
		raw, err := export.EncodeAttributes(attrs)
		if err != nil {
			t.Fatal(err)
		}
		var fast, general bytes.Buffer
		if err := yamlAttributes(&fast, raw); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		r := export.Row{Origin: &export.Origin{}, Attributes: raw}
		m, _ := r.AttributeMap()
		if err := yamlValue(&general, "    ", m); err != nil {
			t.Fatal(err)
		}
		if fast.String() != general.String() {
			t.Errorf("%s:\nfast:\n%s\ngeneral:\n%s", raw, fast.String(), general.String())
		}
	}
	var buf bytes.Buffer
	for _, bad := range []string{`{"a": 1}`, `{"a":1`, `[1]x`, `{"a":tru}`} {
		if err := yamlAttributes(&buf, json.RawMessage(bad)); err == nil || buf.Len() != 0 {
			t.Errorf("%s: accepted (%q)", bad, buf.String())
		}
	}
}
