package offline

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	sigsyaml "sigs.k8s.io/yaml"

	"kollect.dev/agent/internal/collector"
	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/hubclient/manifests"
)

func mustObjects(t *testing.T, docs ...string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, d := range docs {
		u := &unstructured.Unstructured{}
		if err := sigsyaml.Unmarshal([]byte(d), &u.Object); err != nil {
			t.Fatal(err)
		}
		out = append(out, u)
	}
	return out
}

// resolveCore resolves the two kinds these tests use, as a RESTMapper would.
func resolveCore(gvk schema.GroupVersionKind) (schema.GroupVersionResource, bool, error) {
	switch gvk.Kind {
	case "ConfigMap":
		return schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, true, nil
	case "Secret":
		return schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, true, nil
	}
	return schema.GroupVersionResource{}, false, fmt.Errorf("no mapping for %s", gvk)
}

// TestStreamPagesGiveTheRowsOfOneList: objects handed to a Stream a page at a time, one object
// a page, give exactly the rows, failures and counts of every object at once; Helm releases
// are decoded across pages as across one list (the release Secret helm wrote, beside a Secret
// that is no release).
func TestStreamPagesGiveTheRowsOfOneList(t *testing.T) {
	helmProfile, err := os.ReadFile("../../../../docs/examples/helm-releases.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfgObjs := mustObjects(t, `
apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: cm, namespace: k}
spec:
  target: {version: v1, kind: ConfigMap}
  attributes: [{name: size, jsonPath: "{.data.size}", type: int}]
`, `
apiVersion: kollect.dev/v1alpha1
kind: KollectClusterTarget
metadata: {name: cms}
spec: {profileRef: {namespace: k, name: cm}}
`)
	helm, err := manifests.Decode(string(helmProfile))
	if err != nil {
		t.Fatal(err)
	}
	cfgObjs = append(cfgObjs, helm...)
	cfg, err := Load(cfgObjs)
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := cfg.PlanAll(resolveCore)
	if err != nil {
		t.Fatal(err)
	}
	var cms []*unstructured.Unstructured
	for i := range 7 {
		size := fmt.Sprint(i)
		if i == 3 {
			size = "three"
		}
		cms = append(cms, mustObjects(t, fmt.Sprintf(`{apiVersion: v1, kind: ConfigMap, metadata: {name: c%d, namespace: ns%d, uid: u%d}, data: {size: %q}}`, i, i%2, i, size))...)
	}
	release, err := os.ReadFile("../../helmrelease/testdata/sh.helm.release.v1.demo.v2.json")
	if err != nil {
		t.Fatal(err)
	}
	rel := &unstructured.Unstructured{}
	if err := json.Unmarshal(release, &rel.Object); err != nil {
		t.Fatal(err)
	}
	secrets := append(mustObjects(t, `{apiVersion: v1, kind: Secret, metadata: {name: plain, namespace: helm-apps}, type: Opaque}`), rel)
	byGVK := map[schema.GroupVersionKind][]*unstructured.Unstructured{
		{Version: "v1", Kind: "ConfigMap"}: cms, {Version: "v1", Kind: "Secret"}: secrets}

	whole, wholeFailures := Rows(jobs, "east", func(gvk schema.GroupVersionKind) []*unstructured.Unstructured { return byGVK[gvk] }, nil)
	s := NewStream(jobs, "east", nil, Hooks{})
	for _, k := range s.Kinds() {
		for _, obj := range byGVK[k.GVK] {
			s.Add(k.GVK, []*unstructured.Unstructured{obj})
		}
	}
	paged, pagedFailures := s.Finish()
	if !reflect.DeepEqual(canonical(whole), canonical(paged)) {
		t.Errorf("rows differ:\nwhole %s\npaged %s", canonical(whole), canonical(paged))
	}
	if len(whole) != 7 || len(wholeFailures) != 1 || len(pagedFailures) != 1 || pagedFailures[0].Object.GetName() != "c3" {
		t.Errorf("%d rows, failures %v / %v; want 6 ConfigMaps and one release, c3 failing", len(whole), wholeFailures, pagedFailures)
	}
	if st := s.Stats(collector.TargetKey{Name: "cms"}); st != (TargetStats{Listed: 7, Matched: 7, Rows: 6, Failed: 1}) {
		t.Errorf("ConfigMap target counted %+v", st)
	}
}

func canonical(rows []export.Row) []string {
	out := make([]string, len(rows))
	for i := range rows {
		out[i] = string(rows[i].CanonicalJSON())
	}
	return out
}
