package webhook

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kollect.dev/agent/internal/sink/kafka"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// ClusterNamer is a Lookup that knows the cluster name of the agent serving the webhook.
// The CRD's pattern can only check a Kafka topic template's characters; whether the name
// with the cluster in place of {cluster} is one Kafka accepts (at most 249 characters, no
// '/' a cluster name may hold) depends on the agent's cluster name, and each cluster's agent
// validates the sinks of its own cluster.
type ClusterNamer interface {
	AgentCluster() string
}

// validateKafkaTopic refuses a topic whose expansion Kafka would refuse: with the agent's
// cluster name when the lookup knows it, else (kollect validate) the rest of the template.
func validateKafkaTopic(spec *kollectv1.KollectEventSinkSpec, l Lookup) field.ErrorList {
	if spec.Type != kollectv1.EventSinkKafka || spec.Kafka == nil {
		return nil
	}
	var cluster string
	if n, ok := l.(ClusterNamer); ok {
		cluster = n.AgentCluster()
	}
	if err := kafka.CheckTopicTemplate(spec.Kafka.Topic, cluster); err != nil {
		return field.ErrorList{field.Invalid(field.NewPath("spec", "kafka", "topic"), spec.Kafka.Topic, err.Error())}
	}
	return nil
}
