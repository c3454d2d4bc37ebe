package webhook

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kollect.dev/agent/internal/sink/azureblob"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// validateAzureContainer refuses a container whose expansion Azure would refuse: with the
// agent's cluster name when the lookup knows it (a cluster name with capitals, '.' or '/',
// or long enough to pass 63 characters), else (kollect validate) the rest of the template.
// The CRD's pattern checks the template's characters only, as for a Kafka topic.
func validateAzureContainer(spec *kollectv1.KollectSnapshotSinkSpec, l Lookup) field.ErrorList {
	if spec.Type != kollectv1.SnapshotSinkAzureBlob || spec.AzureBlob == nil {
		return nil
	}
	var cluster string
	if n, ok := l.(ClusterNamer); ok {
		cluster = n.AgentCluster()
	}
	if err := azureblob.CheckContainerTemplate(spec.AzureBlob.Container, cluster); err != nil {
		return field.ErrorList{field.Invalid(field.NewPath("spec", "azureBlob", "container"), spec.AzureBlob.Container, err.Error())}
	}
	return nil
}
