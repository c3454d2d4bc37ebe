package webhook

import (
	"context"
	"strings"
	"testing"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// clusterLookup is the webhook's view in an agent of cluster name.
type clusterLookup struct {
	stubLookup
	name string
}

func (c clusterLookup) AgentCluster() string { return c.name }

// TestKafkaTopicExpandedWithTheAgentsCluster: the topic is checked with the agent's cluster
// in place of {cluster}; without a cluster (kollect validate) the rest of the template is.
func TestKafkaTopicExpandedWithTheAgentsCluster(t *testing.T) {
	long := strings.Repeat("a", 236) + ".{cluster}" // 237 + the cluster: 249 for a 12-byte name
	for _, tc := range []struct {
		topic   string
		lookup  Lookup
		refusal string
	}{
		{"kollect.{cluster}.rows", clusterLookup{name: "east"}, ""},
		{"kollect.rows", clusterLookup{name: "prod/eu"}, ""},
		{"kollect.{cluster}.rows", clusterLookup{name: "prod/eu"}, `with cluster name "prod/eu"`},
		{long, clusterLookup{name: "eu-west-1-ab"}, ""},
		{long, clusterLookup{name: "eu-west-1-abc"}, "Kafka allows 249"},
		{long, stubLookup{}, ""},
		{"..", stubLookup{}, "not a topic name"},
		{"kollect.{cluster}.rows", stubLookup{}, ""},
	} {
		es := &kollectv1.KollectEventSink{Spec: kollectv1.KollectEventSinkSpec{Type: kollectv1.EventSinkKafka,
			Kafka: &kollectv1.KafkaSinkConfig{Brokers: []string{"kafka:9092"}, Topic: tc.topic}}}
		res, err := Validate(context.Background(), es, tc.lookup)
		if err != nil {
			t.Fatal(err)
		}
		got := res.Errors.ToAggregate()
		switch {
		case tc.refusal == "" && got != nil:
			t.Errorf("topic %q (%T): %v, want it admitted", tc.topic, tc.lookup, got)
		case tc.refusal != "" && (got == nil || !strings.Contains(got.Error(), "spec.kafka.topic") || !strings.Contains(got.Error(), tc.refusal)):
			t.Errorf("topic %q (%T): %v, want a refusal of spec.kafka.topic with %q", tc.topic, tc.lookup, got, tc.refusal)
		}
	}
}
