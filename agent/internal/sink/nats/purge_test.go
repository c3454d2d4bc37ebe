package nats

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
)

// TestPurgeRemovesOneClusterOnly runs the purge contract against nats-server with a key-value
// bucket: Holdings counts the cluster's messages and bucket entries; the purge removes them
// by subject and key, and every message and entry of the other cluster keeps its sequence.
func TestPurgeRemovesOneClusterOnly(t *testing.T) {
	name := fmt.Sprintf("PURGE%d", time.Now().UnixNano()%1_000_000)
	bucket := name + "_rows"
	c := dial(t, server.URL)
	sinks := map[string]*Sink{}
	for _, cl := range []string{"east", "west"} {
		env := defaultEnv
		env.Cluster = cl
		sinks[cl] = newSink(t, spec(server.URL, name, bucket), env)
	}
	// held reads the stream and bucket with nats.go: rows a consumer folds to, the coverage
	// of the last state messages, state subjects; fingerprint their sequences.
	read := func(cluster string) ([3]int64, string) {
		var out [3]int64
		var parts []string
		states := map[string]*jetstream.RawStreamMsg{}
		for _, m := range c.allMessages(t, name) {
			if m.Header.Get(hCluster) != cluster {
				continue
			}
			parts = append(parts, fmt.Sprintf("%s@%d", m.Subject, m.Sequence))
			if m.Header.Get(hEvent) == evState {
				states[m.Subject] = m
			}
		}
		for _, m := range states {
			var rec stateRecord
			if err := json.Unmarshal(m.Data, &rec); err != nil {
				t.Fatal(err)
			}
			out[1] += int64(len(rec.Coverage))
			out[2]++
		}
		for key := range c.bucket(t, bucket) {
			if strings.HasPrefix(key, cluster+"/") {
				out[0]++
				parts = append(parts, "kv:"+key)
			}
		}
		sort.Strings(parts)
		return out, strings.Join(parts, ",")
	}
	sinktest.PurgeContract(t, sinktest.PurgeCase{East: sinks["east"], West: sinks["west"], Precision: time.Nanosecond,
		Export: func(cluster, inventory string, n int, at time.Time) {
			ex := sinktest.Exporter{Cluster: cluster, Inventory: inventory, Writer: export.Writer{Version: "v0.1.0", Instance: "kollect-system@" + cluster}}
			b := ex.Batch(export.NewSnapshot(sinktest.Deployments(cluster, inventory, n, 1)))
			b.Envelope.ExportedAt = at
			b.Envelope.Coverage = []export.Coverage{sinktest.Complete("deployments", int64(n))}
			if err := sinks[cluster].Export(context.Background(), b); err != nil {
				t.Fatal(err)
			}
		},
		Held:        func(cluster string) [3]int64 { h, _ := read(cluster); return h },
		Fingerprint: func(cluster string) string { _, f := read(cluster); return f },
		// One change event per row on the stream, and its bucket entry.
		Objects: func(n int) int { return 2 * n },
	})
}

// TestPurgeRefusesATemplateThatSharesSubjects: a subject template without a whole {cluster}
// token offers no filter of one cluster's messages, and the purge says so.
func TestPurgeRefusesATemplateThatSharesSubjects(t *testing.T) {
	for _, tmpl := range []string{"kollect.{inventory}.{kind}", "kollect.c-{cluster}.{inventory}.{kind}"} {
		if _, err := clusterFilter(tmpl, "east", ""); err == nil || sink.ClassOf(err) != sink.Terminal {
			t.Fatalf("template %s: %v, want a terminal refusal", tmpl, err)
		}
	}
	if f, err := clusterFilter("kollect.{cluster}.{inventory}.{kind}", "east.1", "shop/web"); err != nil || f != "kollect.east_1.shop/web.*" {
		t.Fatalf("filter %q, %v", f, err)
	}
}
