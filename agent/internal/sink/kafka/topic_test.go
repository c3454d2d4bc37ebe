package kafka

import (
	"context"
	"strings"
	"testing"

	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
)

func TestTopic(t *testing.T) {
	long := strings.Repeat("a", 240)
	for _, tc := range []struct {
		template, cluster, want, err string
	}{
		{"kollect.rows", "east", "kollect.rows", ""},
		{"kollect.rows", "", "kollect.rows", ""},
		{"kollect.{cluster}.rows", "east", "kollect.east.rows", ""},
		{"{cluster}.{cluster}", "eu-1", "eu-1.eu-1", ""},
		{"kollect.{cluster}.rows", "", "", "no cluster name"},
		{"kollect.{cluster}.rows", "prod/eu", "", `has '/'`},
		{"kollect.{cluster}.rows", "prod eu", "", `has ' '`},
		{long + ".{cluster}", "east", long + ".east", ""},
		{long + ".{cluster}", "eu-west-1", "", "Kafka allows 249"},
		{"{cluster}", ".", "", "not a topic name"},
		{"..", "east", "", "not a topic name"},
		{"kollect.{clustr}.rows", "east", "", `has '{'`},
	} {
		got, err := Topic(tc.template, tc.cluster)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("Topic(%q, %q) = %q, %v; want %q", tc.template, tc.cluster, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || sink.ClassOf(err) != sink.Terminal):
			t.Errorf("Topic(%q, %q) = %q, %v; want a terminal error with %q", tc.template, tc.cluster, got, err, tc.err)
		}
	}
}

// TestTopicOfTheAgentsCluster: the sink opened by the agent of a cluster uses the expanded
// name, and one whose expansion is invalid does not open.
func TestTopicOfTheAgentsCluster(t *testing.T) {
	sk := newSink(t, spec(broker.Addr, "kollect.{cluster}.rows"), sink.Env{Cluster: "east", Namespace: "kollect", Name: "events", Secrets: sinktest.Secrets(nil)})
	if sk.topic != "kollect.east.rows" {
		t.Fatalf("topic %s, want kollect.east.rows", sk.topic)
	}
	_, err := open(context.Background(), spec(broker.Addr, "kollect.{cluster}.rows"), sink.Env{Cluster: "prod/eu", Namespace: "kollect", Name: "events"})
	if err == nil || sink.ClassOf(err) != sink.Terminal || !strings.Contains(err.Error(), "kafka sink kollect/events: topic") {
		t.Fatalf("open with cluster prod/eu: %v, want a terminal error naming the sink and the topic", err)
	}
}
