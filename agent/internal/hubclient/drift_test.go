package hubclient

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func managedObject() *unstructured.Unstructured {
	u := object("kollect.dev/v1alpha1", "KollectClusterInventory", "", "fleet")
	u.SetLabels(map[string]string{LabelManagedBy: managedByValue, LabelBundle: "base"})
	u.SetAnnotations(map[string]string{AnnotationRevision: "3", AnnotationDigest: "sha256:1"})
	u.Object["spec"] = map[string]any{"debounce": "1s", "targets": []any{map[string]any{"name": "configmaps"}}, "replicas": int64(2)}
	return u
}

// driftOf finds every change of what the hub set, names who made it when the API server
// knows, and takes the API server's defaults and local-only annotations for no drift.
func TestDriftOf(t *testing.T) {
	want := managedObject()
	for _, tc := range []struct {
		name  string
		edit  func(u *unstructured.Unstructured)
		drift string // substring; "" means no drift
	}{
		{"unchanged", func(*unstructured.Unstructured) {}, ""},
		{"server defaults added", func(u *unstructured.Unstructured) {
			spec := u.Object["spec"].(map[string]any)
			spec["maxDelay"] = "10s"
			spec["targets"].([]any)[0].(map[string]any)["optional"] = false
			spec["replicas"] = float64(2) // another decoder's number
		}, ""},
		{"local annotation added", func(u *unstructured.Unstructured) {
			u.SetAnnotations(map[string]string{AnnotationRevision: "3", AnnotationDigest: "sha256:1", "kollect.dev/resync-now": "x"})
		}, ""},
		{"spec field removed", func(u *unstructured.Unstructured) {
			delete(u.Object["spec"].(map[string]any), "debounce")
		}, "spec changed locally"},
		{"list item removed", func(u *unstructured.Unstructured) {
			u.Object["spec"].(map[string]any)["targets"] = []any{}
		}, "spec changed locally"},
		{"spec edited", func(u *unstructured.Unstructured) {
			u.Object["spec"].(map[string]any)["debounce"] = "7s"
			u.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "kubectl-edit", Operation: metav1.ManagedFieldsOperationUpdate,
				FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:debounce":{}}}`)}}})
		}, `spec edited by "kubectl-edit"`},
		{"managed-by label removed", func(u *unstructured.Unstructured) {
			u.SetLabels(map[string]string{LabelBundle: "base"})
		}, "label kollect.dev/managed-by removed locally"},
		{"label added", func(u *unstructured.Unstructured) {
			u.SetLabels(map[string]string{LabelManagedBy: managedByValue, LabelBundle: "base", "team": "x"})
			u.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "kubectl-label", Operation: metav1.ManagedFieldsOperationUpdate,
				FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{"f:team":{}}}}`)}}})
		}, `labels changed by "kubectl-label" (+team)`},
		{"bundle annotation changed", func(u *unstructured.Unstructured) {
			u.SetAnnotations(map[string]string{AnnotationRevision: "1", AnnotationDigest: "sha256:1"})
		}, "annotations kollect.dev/bundle-revision changed locally"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			live := managedObject()
			tc.edit(live)
			got := driftOf(live, want)
			if tc.drift == "" && got != "" || tc.drift != "" && !strings.Contains(got, tc.drift) {
				t.Fatalf("driftOf = %q, want %q", got, tc.drift)
			}
		})
	}
}
