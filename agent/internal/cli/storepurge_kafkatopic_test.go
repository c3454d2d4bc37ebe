package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/kafka"
	"kollect.dev/agent/internal/sink/sinktest"
	"kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// TestSinksPurgeKafkaPerClusterTopic: given the sink's topic template, purge reads and
// tombstones the topic of the cluster --cluster names, and leaves another cluster's topic as
// it was (what it holds of west, read back).
func TestSinksPurgeKafkaPerClusterTopic(t *testing.T) {
	k, err := testenv.StartKafka(testenv.KafkaOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const templ = "kollect.{cluster}.rows"
	sinks := map[string]sink.Sink{}
	for _, c := range []string{"east", "west"} {
		s, err := kafka.New(ctx, &v1alpha1.KollectEventSink{Spec: v1alpha1.KollectEventSinkSpec{Type: v1alpha1.EventSinkKafka,
			Mode: v1alpha1.EventModeChanges, BufferSize: 1000, Timeout: metav1.Duration{Duration: 20 * time.Second},
			Kafka: &v1alpha1.KafkaSinkConfig{Brokers: []string{k.Addr}, Topic: templ, CreateTopic: true, Partitions: 3}}},
			sink.Env{Cluster: c, Namespace: "shop", Name: "events", Secrets: sinktest.Secrets(nil)})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		sinks[c] = s
		rows := make([]export.Row, 2)
		for i := range rows {
			rows[i] = export.Row{Origin: &export.Origin{Cluster: c, Inventory: "pods", Target: "pods", Version: "v1", Kind: "Pod"},
				Namespace: "ns", Name: fmt.Sprintf("pod-%d", i), UID: fmt.Sprintf("%s-%d", c, i)}
		}
		ex := sinktest.Exporter{Cluster: c}
		if err := ex.Export(ctx, s, export.NewSnapshot(rows)); err != nil {
			t.Fatalf("export of %s: %v", c, err)
		}
	}
	westHeld := func() string {
		o, err := kafka.OpenBrokers(ctx, []string{k.Addr}, "kollect.west.rows", kafka.Auth{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
		held, err := o.Holdings(ctx, "west", "")
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(held)
	}
	before := westHeld()
	out, errOut, code := run(t, "", "sinks", "purge", "--kafka", k.Addr, "--topic", templ, "--cluster", "east", "--force")
	if code != ExitOK || !strings.Contains(out, "kafka://"+k.Addr+"/kollect.east.rows") {
		t.Fatalf("purge of east: exit %d: %s%s", code, out, errOut)
	}
	if held, err := sinks["east"].(sink.Purger).Holdings(ctx, "east", ""); err != nil || len(held) != 0 {
		t.Fatalf("kollect.east.rows holds %v, %v after the purge; want nothing", held, err)
	}
	if after := westHeld(); after != before {
		t.Fatalf("west's holdings changed from %s to %s", before, after)
	}
	if _, errOut, code := run(t, "", "sinks", "purge", "--kafka", k.Addr, "--topic", templ, "--cluster", "prod/eu"); code == ExitOK ||
		!strings.Contains(errOut, "--topic") {
		t.Fatalf("purge of cluster prod/eu with a topic template: exit %d: %s", code, errOut)
	}
}
