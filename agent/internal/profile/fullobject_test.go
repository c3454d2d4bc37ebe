package profile

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	kollectv1 "kollect.dev/api/v1alpha1"
)

func fullProfile(kind string, full kollectv1.FullObject, attrs ...kollectv1.Attribute) *kollectv1.KollectProfile {
	p := profileOf(attrs...)
	p.Spec.Target = kollectv1.GroupVersionKind{Version: "v1", Kind: kind}
	p.Spec.FullObject = &full
	return p
}

// configMap is a ConfigMap as the API server returns it: managedFields, a resourceVersion and
// the annotation kubectl apply writes.
func configMap(data map[string]any) map[string]any {
	return map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{
			"name": "settings", "namespace": "shop", "uid": "u-1", "resourceVersion": "4711",
			"creationTimestamp": "2026-11-03T10:00:00Z",
			"labels":            map[string]any{"team": "a"},
			"annotations": map[string]any{
				"kubectl.kubernetes.io/last-applied-configuration": `{"apiVersion":"v1","kind":"ConfigMap"}`,
				"example.com/owner": "team-a",
			},
			"managedFields": []any{map[string]any{"manager": "kubectl", "operation": "Apply", "time": "2026-11-03T10:00:00Z"}},
		},
		"data": data,
	}
}

func extractFull(t *testing.T, p *kollectv1.KollectProfile, obj map[string]any) (map[string]any, error) {
	t.Helper()
	c, err := Compile(p)
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	if c.MetadataOnly {
		t.Fatal("a fullObject profile reads the whole object; it must not be metadata-only")
	}
	before := runtime.DeepCopyJSON(obj)
	got, err := c.Extract(obj)
	if !reflect.DeepEqual(before, obj) {
		t.Fatal("extraction modified the informer's object")
	}
	return got, err
}

func TestFullObjectPrunesNoiseByDefault(t *testing.T) {
	obj := configMap(map[string]any{"mode": "fast"})
	obj["status"] = map[string]any{"note": "a kind with status"}
	got, err := extractFull(t, fullProfile("ConfigMap", kollectv1.FullObject{},
		kollectv1.Attribute{Name: "mode", JSONPath: "{.data.mode}"}), obj)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"mode": "fast",
		"object": map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{
				"name": "settings", "namespace": "shop", "uid": "u-1", "creationTimestamp": "2026-11-03T10:00:00Z",
				"labels": map[string]any{"team": "a"}, "annotations": map[string]any{"example.com/owner": "team-a"},
			},
			"data": map[string]any{"mode": "fast"},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %v\nwant %v", got, want)
	}
}

func TestFullObjectOptions(t *testing.T) {
	obj := configMap(map[string]any{"mode": "fast"})
	obj["status"] = map[string]any{"phase": "Ready"}
	got, err := extractFull(t, fullProfile("ConfigMap", kollectv1.FullObject{
		Attribute: "manifest", Status: true, KeepManagedFields: true,
		Prune: []string{`metadata.annotations.example\.com/owner`, "metadata.labels", "data.absent", "metadata.name.deeper"},
	}), obj)
	if err != nil {
		t.Fatal(err)
	}
	m := got["manifest"].(map[string]any)
	meta := m["metadata"].(map[string]any)
	if _, ok := meta["managedFields"]; !ok {
		t.Error("keepManagedFields: managedFields removed")
	}
	if _, ok := m["status"]; !ok {
		t.Error("status: true: status removed")
	}
	if _, ok := meta["labels"]; ok {
		t.Error("prune metadata.labels: still there")
	}
	// The last-applied annotation is pruned by default and example.com/owner by the escaped
	// path: an emptied annotations map goes too.
	if _, ok := meta["annotations"]; ok {
		t.Errorf("annotations left: %v", meta["annotations"])
	}
	if meta["name"] != "settings" {
		t.Errorf("a path through a string must leave it alone: name %v", meta["name"])
	}
}

func TestFullObjectCutsTheLargestFieldAndSaysSo(t *testing.T) {
	big := strings.Repeat("x", 100<<10)
	obj := configMap(map[string]any{"small": "1", "app.properties": big, "other": strings.Repeat("y", 1000)})
	got, err := extractFull(t, fullProfile("ConfigMap", kollectv1.FullObject{MaxBytes: 4096}), obj)
	var trunc *TruncatedError
	if !errors.As(err, &trunc) || !IsTruncated(err) {
		t.Fatalf("want a TruncatedError, got %v", err)
	}
	if want := []string{`data.app\.properties`}; !reflect.DeepEqual(trunc.Paths, want) {
		t.Fatalf("cut %v, want %v (one key of data, not all of it)", trunc.Paths, want)
	}
	if !reflect.DeepEqual(got["objectTruncated"], []any{`data.app\.properties`}) {
		t.Fatalf("the row must say what was cut: %v", got["objectTruncated"])
	}
	data := got["object"].(map[string]any)["data"].(map[string]any)
	if data["small"] != "1" || len(data["other"].(string)) != 1000 {
		t.Fatalf("kept data %v", data)
	}
	if size, _ := encodedSize(got["object"]); size > 4096 {
		t.Fatalf("exported %d bytes, over maxBytes", size)
	}
	// The row still encodes, and the error reads well in a condition.
	c, _ := Compile(fullProfile("ConfigMap", kollectv1.FullObject{MaxBytes: 4096}))
	raw, err := c.ExtractJSON(obj)
	if raw == nil || !IsTruncated(err) {
		t.Fatalf("ExtractJSON: %d bytes, %v", len(raw), err)
	}
	if !json.Valid(raw) || !strings.Contains(err.Error(), `larger than maxBytes 4096, exported without data.app\.properties`) {
		t.Fatalf("row %q, error %v", raw[:80], err)
	}
}

func TestFullObjectNeverCutsItsIdentity(t *testing.T) {
	obj := configMap(map[string]any{"a": strings.Repeat("a", 3000), "b": strings.Repeat("b", 3000)})
	obj["spec"] = map[string]any{"list": []any{strings.Repeat("c", 5000)}}
	got, err := extractFull(t, fullProfile("ConfigMap", kollectv1.FullObject{MaxBytes: 10}), obj)
	if !IsTruncated(err) {
		t.Fatalf("want a TruncatedError, got %v", err)
	}
	want := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "settings", "namespace": "shop"}}
	if !reflect.DeepEqual(got["object"], want) {
		t.Fatalf("kept %v, want only the identity", got["object"])
	}
}

func TestFullObjectSmallObjectIsNotCut(t *testing.T) {
	got, err := extractFull(t, fullProfile("ConfigMap", kollectv1.FullObject{}), configMap(map[string]any{"k": "v"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got["objectTruncated"]; ok {
		t.Fatal("an object under maxBytes must not carry objectTruncated")
	}
}

func TestFullObjectCompileErrors(t *testing.T) {
	cases := map[string]struct {
		p    *kollectv1.KollectProfile
		want string
	}{
		"secret": {fullProfile("Secret", kollectv1.FullObject{}), "fullObject cannot export Secrets"},
		"name taken": {fullProfile("ConfigMap", kollectv1.FullObject{},
			kollectv1.Attribute{Name: "objectTruncated", JSONPath: "{.data}"}), "attribute objectTruncated: the name is taken by fullObject"},
		"bad prune path":    {fullProfile("ConfigMap", kollectv1.FullObject{Prune: []string{"metadata..labels"}}), `fullObject.prune "metadata..labels": empty path segment`},
		"nothing to export": {profileOf(), "set attributes, fullObject or both"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Compile(tc.p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
	// A custom resource called Secret is not a core Secret.
	p := fullProfile("Secret", kollectv1.FullObject{})
	p.Spec.Target.Group = "example.com"
	if _, err := Compile(p); err != nil {
		t.Fatalf("example.com Secret: %v", err)
	}
}

func TestPathRoundTrip(t *testing.T) {
	for _, s := range []string{"a", "a.b", `metadata.annotations.example\.com/x`, `a\.b\.c`} {
		p, err := parsePath(s)
		if err != nil || formatPath(p) != s {
			t.Fatalf("%q: %v %v", s, p, err)
		}
	}
}

func BenchmarkExtractFullObject(b *testing.B) {
	c, err := Compile(fullProfile("ConfigMap", kollectv1.FullObject{},
		kollectv1.Attribute{Name: "mode", JSONPath: "{.data.mode}"}))
	if err != nil {
		b.Fatal(err)
	}
	obj := configMap(map[string]any{"mode": "fast", "config.yaml": strings.Repeat("key: value\n", 100)})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.ExtractJSON(obj); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkExtractFullObjectCut(b *testing.B) {
	c, err := Compile(fullProfile("ConfigMap", kollectv1.FullObject{MaxBytes: 4096}))
	if err != nil {
		b.Fatal(err)
	}
	obj := configMap(map[string]any{"mode": "fast", "blob": strings.Repeat("x", 100<<10)})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.ExtractJSON(obj); !IsTruncated(err) {
			b.Fatal(err)
		}
	}
}
