package webhook_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// TestKafkaTopicTemplateAtAdmission: the agent (cluster "admission") admits a topic with
// {cluster}; the CRD's pattern refuses characters Kafka does not accept and a misspelt
// placeholder, and the webhook a name Kafka refuses that the pattern lets through.
func TestKafkaTopicTemplateAtAdmission(t *testing.T) {
	ns := namespace(t, "kafka-topic")
	kafka := func(name, topic string) *kollectv1.KollectEventSink {
		return &kollectv1.KollectEventSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: kollectv1.KollectEventSinkSpec{
			Type: kollectv1.EventSinkKafka, Kafka: &kollectv1.KafkaSinkConfig{Brokers: []string{"kafka:9092"}, Topic: topic}}}
	}
	mustCreate(t, kafka("per-cluster", "kollect.{cluster}.rows"), kafka("shared", "kollect.rows"))
	refused(t, kafka("slash", "kollect/{cluster}"), "spec.kafka.topic", "should match")
	refused(t, kafka("typo", "kollect.{clustr}.rows"), "spec.kafka.topic", "should match")
	refused(t, kafka("dots", ".."), "spec.kafka.topic", "not a topic name")
}
