package webhook_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// TestAzureContainerTemplateAtAdmission: the agent (cluster "admission") admits a container
// with {cluster} and one without; the CRD's pattern refuses characters Azure does not accept,
// a misspelt placeholder and a hyphen at either end, and its rule two hyphens in a row.
func TestAzureContainerTemplateAtAdmission(t *testing.T) {
	ns := namespace(t, "azure-container")
	azure := func(name, container string) *kollectv1.KollectSnapshotSink {
		return &kollectv1.KollectSnapshotSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: kollectv1.KollectSnapshotSinkSpec{
			Type: kollectv1.SnapshotSinkAzureBlob, AzureBlob: &kollectv1.AzureBlobSinkConfig{Account: "fleetlake", Container: container,
				SecretRef: kollectv1.SecretReference{Name: "azure"}}}}
	}
	mustCreate(t, azure("per-cluster", "kollect-{cluster}"), azure("bare", "{cluster}"), azure("shared", "inventory"))
	refused(t, azure("underscore", "kollect_{cluster}"), "spec.azureBlob.container", "should match")
	refused(t, azure("capital", "Kollect-{cluster}"), "spec.azureBlob.container", "should match")
	refused(t, azure("typo", "kollect-{clustr}"), "spec.azureBlob.container", "should match")
	refused(t, azure("trailing", "{cluster}-"), "spec.azureBlob.container", "should match")
	refused(t, azure("double", "kollect--{cluster}"), "spec.azureBlob.container", "no consecutive hyphens")
}
