package profile

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kollectv1 "kollect.dev/api/v1alpha1"
)

func deployment() map[string]any {
	return map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "web", "namespace": "shop", "labels": map[string]any{"team": "a", "tier": "front"}},
		"spec": map[string]any{
			"replicas": int64(3),
			"template": map[string]any{"spec": map[string]any{"containers": []any{
				map[string]any{"name": "app", "image": "nginx:1.27", "resources": map[string]any{"limits": map[string]any{"memory": "256Mi"}}},
				map[string]any{"name": "sidecar", "image": "envoy:1.30"},
			}}},
		},
		"status": map[string]any{"readyReplicas": int64(2)},
	}
}

func profileOf(attrs ...kollectv1.Attribute) *kollectv1.KollectProfile {
	return &kollectv1.KollectProfile{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: 7},
		Spec:       kollectv1.KollectProfileSpec{Target: kollectv1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, Attributes: attrs},
	}
}

func TestExtractTypedValues(t *testing.T) {
	c, err := Compile(profileOf(
		kollectv1.Attribute{Name: "replicas", JSONPath: "{.spec.replicas}", Type: kollectv1.AttributeInt},
		kollectv1.Attribute{Name: "images", JSONPath: "{.spec.template.spec.containers[*].image}", Type: kollectv1.AttributeList},
		kollectv1.Attribute{Name: "firstImage", JSONPath: ".spec.template.spec.containers[0].image"},
		kollectv1.Attribute{Name: "ready", CEL: "object.status.readyReplicas == object.spec.replicas", Type: kollectv1.AttributeBool},
		kollectv1.Attribute{Name: "names", CEL: "object.spec.template.spec.containers.map(c, c.name)", Type: kollectv1.AttributeList},
		kollectv1.Attribute{Name: "memory", CEL: "quantity(object.spec.template.spec.containers[0].resources.limits.memory).asInteger()", Type: kollectv1.AttributeInt},
		kollectv1.Attribute{Name: "labels", JSONPath: "{.metadata.labels}", Type: kollectv1.AttributeMap},
		kollectv1.Attribute{Name: "upper", CEL: "object.metadata.name.upperAscii()"},
		kollectv1.Attribute{Name: "ratio", CEL: "double(object.status.readyReplicas) / double(object.spec.replicas)", Type: kollectv1.AttributeFloat},
		kollectv1.Attribute{Name: "owner", JSONPath: "{.metadata.labels.owner}", Optional: true},
		kollectv1.Attribute{Name: "filtered", JSONPath: `{.spec.template.spec.containers[?(@.name=="sidecar")].image}`},
	))
	if err != nil {
		t.Fatal(err)
	}
	if c.Generation != 7 || c.MetadataOnly {
		t.Fatalf("generation %d, metadataOnly %v", c.Generation, c.MetadataOnly)
	}
	got, err := c.Extract(deployment())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"replicas": int64(3), "images": []any{"nginx:1.27", "envoy:1.30"}, "firstImage": "nginx:1.27",
		"ready": false, "names": []any{"app", "sidecar"}, "memory": int64(256 << 20),
		"labels": map[string]any{"team": "a", "tier": "front"}, "upper": "WEB", "ratio": 2.0 / 3.0,
		"filtered": "envoy:1.30",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("extracted\n got %#v\nwant %#v", got, want)
	}
	raw, err := c.ExtractJSON(deployment())
	if err != nil || !strings.HasPrefix(string(raw), `{"filtered":"envoy:1.30","firstImage":"nginx:1.27","images":["nginx:1.27","envoy:1.30"]`) {
		t.Fatalf("canonical JSON: %s %v", raw, err)
	}
}

func TestCompileReportsEveryProblemWithPosition(t *testing.T) {
	_, err := Compile(profileOf(
		kollectv1.Attribute{Name: "bad", CEL: "object.spec.replicas +"},
		kollectv1.Attribute{Name: "ok", JSONPath: "{.spec.replicas}"},
		kollectv1.Attribute{Name: "badpath", JSONPath: "{.spec.replicas[}"},
	))
	var ce *CompileError
	if !errors.As(err, &ce) || len(ce.Problems) != 2 {
		t.Fatalf("got %v, want two problems", err)
	}
	if !strings.Contains(ce.Problems[0], "attribute bad: CEL:") || !strings.Contains(ce.Problems[0], "1:23") {
		t.Errorf("CEL problem lacks attribute name or position: %s", ce.Problems[0])
	}
	if !strings.Contains(ce.Problems[1], "attribute badpath: invalid JSONPath") {
		t.Errorf("JSONPath problem: %s", ce.Problems[1])
	}
}

func TestMissingAndMistypedAttributes(t *testing.T) {
	c, err := Compile(profileOf(
		kollectv1.Attribute{Name: "strategy", JSONPath: "{.spec.strategy.type}"},
		kollectv1.Attribute{Name: "owner", CEL: "object.metadata.labels.owner"},
		kollectv1.Attribute{Name: "opt", CEL: "object.spec.paused", Optional: true},
	))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Extract(deployment())
	var me *MissingError
	if !errors.As(err, &me) || !reflect.DeepEqual(me.Attributes, []string{"strategy", "owner"}) {
		t.Fatalf("got %v, want strategy and owner missing", err)
	}

	c, _ = Compile(profileOf(kollectv1.Attribute{Name: "n", JSONPath: "{.metadata.name}", Type: kollectv1.AttributeInt}))
	if _, err := c.Extract(deployment()); err == nil || !strings.Contains(err.Error(), `attribute n: want an integer, got a string that is not one`) {
		t.Fatalf("coercion error = %v", err)
	}
	// The failure is structured: the attribute is read without parsing the message.
	_, err = c.Extract(deployment())
	var ae *AttributeError
	if !errors.As(err, &ae) || ae.Attribute != "n" {
		t.Fatalf("coercion error %v is not an AttributeError naming n", err)
	}
}

// An expression whose cost grows with the object compiles; the budget stops it at run time
// on the object that is too large. One that exceeds the budget on every object is refused when
// it is compiled (the shared table in kollect.dev/expr/exprtest holds that case).
func TestCostLimitStopsRunawayExpressions(t *testing.T) {
	c, err := Compile(profileOf(kollectv1.Attribute{Name: "x", Type: kollectv1.AttributeInt,
		CEL: "object.spec.items.map(a, object.spec.items.map(b, object.spec.items.map(c, a+b+c))).size()"}))
	if err != nil {
		t.Fatal(err)
	}
	items := make([]any, 200)
	for i := range items {
		items[i] = int64(i)
	}
	obj := deployment()
	obj["spec"].(map[string]any)["items"] = items[:2]
	if got, err := c.Extract(obj); err != nil || got["x"] != int64(2) {
		t.Fatalf("small object: %v %v", got, err)
	}
	obj["spec"].(map[string]any)["items"] = items
	if _, err := c.Extract(obj); err == nil || !strings.Contains(err.Error(), "cost limit") {
		t.Fatalf("got %v, want a cost limit error", err)
	}
}

func TestMetadataOnly(t *testing.T) {
	c, err := Compile(profileOf(
		kollectv1.Attribute{Name: "team", JSONPath: "{.metadata.labels.team}"},
		kollectv1.Attribute{Name: "n", CEL: "object.metadata.name + '-' + object.metadata.namespace"},
	))
	if err != nil || !c.MetadataOnly {
		t.Fatalf("metadata-only profile not detected: %v", err)
	}
}

func benchProfile(b *testing.B, attr kollectv1.Attribute) {
	c, err := Compile(profileOf(attr))
	if err != nil {
		b.Fatal(err)
	}
	obj := deployment()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Extract(obj); err != nil {
			b.Fatal(err)
		}
	}
}

// The goal is ≤ 2 µs and ≤ 10 allocations per attribute (the map of results counts once).
func BenchmarkExtractJSONPath(b *testing.B) {
	benchProfile(b, kollectv1.Attribute{Name: "image", JSONPath: "{.spec.template.spec.containers[0].image}"})
}

func BenchmarkExtractJSONPathList(b *testing.B) {
	benchProfile(b, kollectv1.Attribute{Name: "images", JSONPath: "{.spec.template.spec.containers[*].image}", Type: kollectv1.AttributeList})
}

func BenchmarkExtractCEL(b *testing.B) {
	benchProfile(b, kollectv1.Attribute{Name: "ready", CEL: "object.status.readyReplicas == object.spec.replicas", Type: kollectv1.AttributeBool})
}

func BenchmarkExtractCELString(b *testing.B) {
	benchProfile(b, kollectv1.Attribute{Name: "image", CEL: "object.spec.template.spec.containers[0].image"})
}
