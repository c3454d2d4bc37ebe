package kafka

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
	"kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// broker is shared by the tests that do not stop it.
var broker *testenv.Kafka

func TestMain(m *testing.M) {
	k, err := testenv.StartKafka(testenv.KafkaOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "kafka tests need kfakesrv:", err)
		os.Exit(1)
	}
	broker = k
	code := m.Run()
	k.Stop()
	os.Exit(code)
}

func spec(addr, topic string) *v1alpha1.KollectEventSinkSpec {
	return &v1alpha1.KollectEventSinkSpec{Type: v1alpha1.EventSinkKafka, Mode: v1alpha1.EventModeChanges,
		BufferSize: 100_000, Timeout: metav1.Duration{Duration: 20 * time.Second},
		Kafka: &v1alpha1.KafkaSinkConfig{Brokers: []string{addr}, Topic: topic, Compression: "zstd",
			CreateTopic: true, Partitions: 3}}
}

func newSink(t testing.TB, s *v1alpha1.KollectEventSinkSpec, env sink.Env) *Sink {
	t.Helper()
	if env.Cluster == "" {
		env = sink.Env{Cluster: "c1", Namespace: "kollect", Name: "events", Secrets: sinktest.Secrets(nil)}
	}
	sk, err := open(context.Background(), s, env)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sk.Close() })
	return sk
}

func row(uid string, v int) export.Row {
	attrs, err := export.EncodeAttributes(map[string]any{"v": v, "image": "nginx:1.27"})
	if err != nil {
		panic(err)
	}
	return export.Row{Origin: &export.Origin{Cluster: "c1", Inventory: "pods", Target: "pods", Version: "v1", Kind: "Pod"}, Namespace: "ns", Name: "pod-" + uid, UID: uid, Attributes: attrs}
}

// exporter drives the sink the way the agent's delivery worker does.
type exporter = sinktest.Exporter

// message is one record as kcat prints it with -J.
type message struct {
	Partition int      `json:"partition"`
	Offset    int64    `json:"offset"`
	Key       string   `json:"key"`
	Payload   *string  `json:"payload"`
	Headers   []string `json:"headers"`
}

func (m *message) header(k string) string {
	for i := 0; i+1 < len(m.Headers); i += 2 {
		if m.Headers[i] == k {
			return m.Headers[i+1]
		}
	}
	return ""
}

func (m *message) event(t testing.TB) export.ChangeEvent {
	t.Helper()
	var ev export.ChangeEvent
	if m.Payload == nil {
		t.Fatalf("record %s@%d is a tombstone, not an event", m.Key, m.Offset)
	}
	if err := json.Unmarshal([]byte(*m.Payload), &ev); err != nil {
		t.Fatalf("record %s: %v: %s", m.Key, err, *m.Payload)
	}
	return ev
}

// kcat reads the whole topic with librdkafka's kcat, a client nobody here wrote, and returns
// the records grouped by key in partition order. State records (kollect-event=state) are left
// out, as a consumer of rows filters them; kcatAll keeps them.
func kcat(t testing.TB, addr, topic string, extra ...string) map[string][]message {
	t.Helper()
	byKey := kcatAll(t, addr, topic, extra...)
	for key, msgs := range byKey {
		if len(msgs) > 0 && msgs[0].header(hEvent) == evState {
			delete(byKey, key)
		}
	}
	return byKey
}

// kcatAll is kcat with the state records.
func kcatAll(t testing.TB, addr, topic string, extra ...string) map[string][]message {
	t.Helper()
	args := append([]string{"-C", "-b", addr, "-t", topic, "-e", "-J", "-q"}, extra...)
	out, err := exec.Command("kcat", args...).Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("kcat %s: %v: %s", strings.Join(args, " "), err, stderr)
	}
	byKey := map[string][]message{}
	byPartition := map[int][]message{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" {
			continue
		}
		var m message
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("kcat output %q: %v", line, err)
		}
		byPartition[m.Partition] = append(byPartition[m.Partition], m)
	}
	for _, msgs := range byPartition {
		for i, m := range msgs {
			if i > 0 && msgs[i-1].Offset >= m.Offset {
				t.Fatalf("kcat returned partition %d out of order", m.Partition)
			}
			byKey[m.Key] = append(byKey[m.Key], m)
		}
	}
	return byKey
}

// compacted is what a compacted topic converges to: the latest value per key, tombstoned
// keys gone.
func compacted(t testing.TB, byKey map[string][]message) map[string]string {
	t.Helper()
	state := map[string]string{}
	for key, msgs := range byKey {
		last := msgs[len(msgs)-1]
		if last.Payload == nil {
			continue
		}
		ev := last.event(t)
		if ev.Type == export.ChangeDelete {
			t.Fatalf("key %s: a delete event is not followed by a tombstone", key)
		}
		state[key] = string(ev.Row.CanonicalJSON())
	}
	return state
}

func assertState(t testing.TB, state map[string]string, s *export.Snapshot) {
	t.Helper()
	if len(state) != len(s.Rows) {
		t.Fatalf("consumer state holds %d keys, snapshot %d", len(state), len(s.Rows))
	}
	for i := range s.Rows {
		r := &s.Rows[i]
		if got := state[r.Key().String()]; got != string(r.CanonicalJSON()) {
			t.Fatalf("key %s: consumer holds %s, snapshot %s", r.Key(), got, r.CanonicalJSON())
		}
	}
}
