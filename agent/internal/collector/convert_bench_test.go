package collector

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// benchConfigMap is the agent benchmark's small ConfigMap as the API server returns it: two
// labels, two data entries and the managedFields entry of its create.
func benchConfigMap() *corev1.ConfigMap {
	created := metav1.NewTime(time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC))
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "tenant-042", Name: "cm-0004242", UID: "9b2f7a8e-3c1d-4e5f-8a9b-0c1d2e3f4a5b",
			ResourceVersion: "1234567", CreationTimestamp: created,
			Labels: map[string]string{"app": "app-42", "tier": "web"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "agentbench", Operation: metav1.ManagedFieldsOperationUpdate,
				APIVersion: "v1", Time: &created, FieldsType: "FieldsV1",
				FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{".":{},"f:mode":{},"f:replicas":{}},"f:metadata":{"f:labels":{".":{},"f:app":{},"f:tier":{}}}}`)}}},
		},
		Data: map[string]string{"mode": "blue", "replicas": "3"},
	}
}

// BenchmarkToUnstructuredConfigMap is the conversion of a built-in object decoded from
// protobuf into the form the profiles read, once per object of a list.
func BenchmarkToUnstructuredConfigMap(b *testing.B) {
	gvk := schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	objs := make([]*corev1.ConfigMap, b.N)
	for i := range objs {
		objs[i] = benchConfigMap()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := toUnstructured(objs[i], gvk); err != nil {
			b.Fatal(err)
		}
	}
}
