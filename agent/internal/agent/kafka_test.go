package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/export"
	kollectv1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// readTopic consumes a topic from the start until it has been quiet for a second.
func readTopic(t *testing.T, addr, topic string) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r); n++ })
		if n == 0 {
			return out
		}
	}
}

// latest folds a topic the way compaction does: the last value per key, tombstones remove.
func latest(recs []*kgo.Record) map[string]string {
	state := map[string]string{}
	for _, r := range recs {
		if r.Value == nil {
			delete(state, string(r.Key))
			continue
		}
		var ev export.ChangeEvent
		// The inventory's state record (key cluster/inventory/_state) is no row.
		if strings.HasSuffix(string(r.Key), "/_state") || json.Unmarshal(r.Value, &ev) != nil || ev.Row == nil || ev.Type == export.ChangeDelete {
			continue
		}
		state[string(r.Key)] = ev.Row.Name + "=" + string(ev.Row.Attributes)
	}
	return state
}

// TestKafkaThroughTheAgent runs the real agent with the real Kafka sink: create, change and
// delete give upsert, upsert, delete and a tombstone for the key, in order; a broker frozen
// during churn loses nothing, and the compacted state equals the cluster's.
func TestKafkaThroughTheAgent(t *testing.T) {
	t.Parallel()
	broker, err := testenv.StartKafka(testenv.KafkaOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Stop)
	ns := namespace(t, "kafka-e2e")
	create(t, &kollectv1.KollectEventSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bus"}, Spec: kollectv1.KollectEventSinkSpec{
		Type: kollectv1.EventSinkKafka, Mode: kollectv1.EventModeChanges, BufferSize: 10000, Timeout: metav1.Duration{Duration: 5 * time.Second},
		Kafka: &kollectv1.KafkaSinkConfig{Brokers: []string{broker.Addr}, Topic: "kollect.rows", Compression: "zstd", CreateTopic: true, Partitions: 3},
	}})
	create(t, colorInventory(ns, kollectv1.SinkReferences{Event: []kollectv1.LocalObjectReference{{Name: "bus"}}})...)
	startAgentWith(t, nil, "c-kafka", ns, nil)

	ctx := context.Background()
	cm := configMap(ns, "a", map[string]string{"color": "red"})
	create(t, cm)
	history := func() string {
		var parts []string
		for _, r := range readTopic(t, broker.Addr, "kollect.rows") {
			if !strings.HasSuffix(string(r.Key), "/"+string(cm.UID)) {
				continue
			}
			if r.Value == nil {
				parts = append(parts, "tombstone")
				continue
			}
			var ev export.ChangeEvent
			_ = json.Unmarshal(r.Value, &ev)
			parts = append(parts, string(ev.Type))
		}
		return strings.Join(parts, ",")
	}
	eventually(t, 30*time.Second, "the upsert", func() (bool, string) { return history() == "upsert", history() })
	cm.Data["color"] = "blue"
	if err := cp.Client.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the second upsert", func() (bool, string) { return history() == "upsert,upsert", history() })
	if err := cp.Client.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "delete and tombstone", func() (bool, string) {
		return history() == "upsert,upsert,delete,tombstone", history()
	})

	// Freeze the broker during churn; on its return every change arrives.
	if err := broker.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		create(t, configMap(ns, fmt.Sprintf("churn-%d", i), map[string]string{"color": fmt.Sprint(i)}))
		time.Sleep(300 * time.Millisecond)
	}
	// The freeze lasts until an export has failed against the frozen broker (its 5 s timeout),
	// as status shows, so that the return below is a return from an outage the agent saw.
	eventually(t, 60*time.Second, "an export failing against the frozen broker", func() (bool, string) {
		inv := &kollectv1.KollectInventory{}
		if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "inv"}, inv); err != nil {
			return false, err.Error()
		}
		for _, s := range inv.Status.Sinks {
			if s.Name == "bus" && s.LastError != "" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", inv.Status.Sinks)
	})
	if err := broker.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the compacted state equals the cluster", func() (bool, string) {
		state := latest(readTopic(t, broker.Addr, "kollect.rows"))
		var names []string
		for _, v := range state {
			names = append(names, v)
		}
		return len(state) == 5, strings.Join(names, " ")
	})
}
