package nats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
	"kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// server is shared by the tests that do not stop it; each test uses its own stream.
var server *testenv.NATS

func TestMain(m *testing.M) {
	srv, err := testenv.StartNATS(testenv.NATSOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "nats tests need nats-server:", err)
		os.Exit(1)
	}
	server = srv
	code := m.Run()
	srv.Stop()
	os.Exit(code)
}

// spec publishes to stream name on subjects <name>.{cluster}.{inventory}.{kind}.
func spec(url, name, bucket string) *v1alpha1.KollectEventSinkSpec {
	return &v1alpha1.KollectEventSinkSpec{Type: v1alpha1.EventSinkNATS, Mode: v1alpha1.EventModeChanges,
		BufferSize: 100_000, Timeout: metav1.Duration{Duration: 20 * time.Second},
		NATS: &v1alpha1.NATSSinkConfig{Servers: []string{url}, Stream: name,
			SubjectTemplate: name + ".{cluster}.{inventory}.{kind}", CreateStream: true, KVBucket: bucket}}
}

var defaultEnv = sink.Env{Cluster: "c1", Namespace: "kollect", Name: "events", Secrets: sinktest.Secrets(nil)}

func newSink(t testing.TB, s *v1alpha1.KollectEventSinkSpec, env sink.Env) *Sink {
	t.Helper()
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

// client is an independent reader of the stream and bucket.
type client struct {
	nc *nats.Conn
	js jetstream.JetStream
}

func dial(t testing.TB, url string) *client {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &client{nc, js}
}

// messages returns every message of the stream in order but the state messages
// (Kollect-Event: state), as a consumer of rows filters them.
func (c *client) messages(t testing.TB, stream string) []*jetstream.RawStreamMsg {
	t.Helper()
	var out []*jetstream.RawStreamMsg
	for _, m := range c.allMessages(t, stream) {
		if m.Header.Get(hEvent) != evState {
			out = append(out, m)
		}
	}
	return out
}

// allMessages returns every message of the stream in order.
func (c *client) allMessages(t testing.TB, stream string) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := t.Context()
	st, err := c.js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		} else if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

func (c *client) count(t testing.TB, stream string) uint64 {
	t.Helper()
	st, err := c.js.Stream(t.Context(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func decode(t testing.TB, m *jetstream.RawStreamMsg) export.ChangeEvent {
	t.Helper()
	var ev export.ChangeEvent
	if err := json.Unmarshal(m.Data, &ev); err != nil {
		t.Fatalf("message %d on %s: %v", m.Sequence, m.Subject, err)
	}
	return ev
}

// fold is the state a consumer of the stream converges to: latest row per key.
func fold(t testing.TB, msgs []*jetstream.RawStreamMsg) map[string]string {
	t.Helper()
	state := map[string]string{}
	for _, m := range msgs {
		ev := decode(t, m)
		if ev.Type == export.ChangeDelete {
			delete(state, ev.Key)
		} else {
			state[ev.Key] = string(ev.Row.CanonicalJSON())
		}
	}
	return state
}

// bucket returns the key-value bucket's rows by identity key.
func (c *client) bucket(t testing.TB, name string) map[string]string {
	t.Helper()
	ctx := t.Context()
	kv, err := c.js.KeyValue(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	state := map[string]string{}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for key := range keys.Keys() {
		e, err := kv.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		var r export.Row
		if err := json.Unmarshal(e.Value(), &r); err != nil {
			t.Fatalf("bucket key %s: %v", key, err)
		}
		state[r.Key().String()] = string(r.CanonicalJSON())
	}
	return state
}

func assertState(t testing.TB, what string, state map[string]string, s *export.Snapshot) {
	t.Helper()
	if len(state) != len(s.Rows) {
		t.Fatalf("%s holds %d keys, snapshot %d", what, len(state), len(s.Rows))
	}
	for i := range s.Rows {
		r := &s.Rows[i]
		if got := state[r.Key().String()]; got != string(r.CanonicalJSON()) {
			t.Fatalf("%s key %s: holds %s, snapshot %s", what, r.Key(), got, r.CanonicalJSON())
		}
	}
}
