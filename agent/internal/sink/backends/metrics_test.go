package backends

import (
	"context"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/agent/internal/sink"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// TestEventSinksBuiltByTheTableReportTheirBuffers checks that a registerer makes the table
// track the event sinks it builds, until they are closed. A Kafka sink connects lazily, so no
// broker is needed.
func TestEventSinksBuiltByTheTableReportTheirBuffers(t *testing.T) {
	reg := prometheus.NewRegistry()
	table := Factories(reg)
	obj := &kollectv1.KollectEventSink{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "bus"},
		Spec: kollectv1.KollectEventSinkSpec{Type: kollectv1.EventSinkKafka,
			Kafka: &kollectv1.KafkaSinkConfig{Brokers: []string{"127.0.0.1:1"}, Topic: "inventory"}}}
	s, err := table[sink.Key(kollectv1.SinkFamilyEvent, string(kollectv1.EventSinkKafka))](context.Background(), obj,
		sink.Env{Cluster: "c1", Namespace: "ns", Name: "bus", Log: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	want := "# HELP kollect_event_buffer_pending Change events owed to an event sink's broker.\n# TYPE kollect_event_buffer_pending gauge\nkollect_event_buffer_pending{sink=\"ns/bus\"} 0\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kollect_event_buffer_pending"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "kollect_event_buffer_pending"); err != nil || n != 0 {
		t.Fatalf("%d series (%v) after the sink closed", n, err)
	}
}
