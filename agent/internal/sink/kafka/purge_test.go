package kafka

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
)

// latestOf is, per key of cluster (by its kollect-cluster header), the latest record as kcat
// (a client nobody here wrote) reads the topic: what a compacted topic converges to.
func latestOf(t *testing.T, topic, cluster string) map[string]message {
	t.Helper()
	out := map[string]message{}
	for key, msgs := range kcatAll(t, broker.Addr, topic) {
		if last := msgs[len(msgs)-1]; last.header(hCluster) == cluster {
			out[key] = last
		}
	}
	return out
}

// heldOn counts what a compacted consumer sees of cluster: row keys with a value, the coverage
// entries of its state records, and state keys with a value.
func heldOn(t *testing.T, topic, cluster string) [3]int64 {
	t.Helper()
	var out [3]int64
	for _, m := range latestOf(t, topic, cluster) {
		switch {
		case m.Payload == nil:
		case m.header(hEvent) == evState:
			var rec stateRecord
			if err := json.Unmarshal([]byte(*m.Payload), &rec); err != nil {
				t.Fatal(err)
			}
			out[1] += int64(len(rec.Coverage))
			out[2]++
		default:
			out[0]++
		}
	}
	return out
}

// TestPurgeTombstonesOneClusterOnly runs the purge contract against kfake (a stand-in for
// Kafka), read back with kcat: after the purge every key of the cluster, the state records'
// included, ends in a tombstone, so a compacted consumer no longer sees the cluster, and no
// key of the other cluster got a record.
func TestPurgeTombstonesOneClusterOnly(t *testing.T) {
	topic := fmt.Sprintf("purge-%d", time.Now().UnixNano())
	sinks := map[string]*Sink{}
	for _, c := range []string{"east", "west"} {
		sinks[c] = newSink(t, spec(broker.Addr, topic), sink.Env{Cluster: c, Namespace: "kollect", Name: "events", Secrets: sinktest.Secrets(nil)})
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
		Held: func(cluster string) [3]int64 { return heldOn(t, topic, cluster) },
		Fingerprint: func(cluster string) string {
			var parts []string
			for key, m := range latestOf(t, topic, cluster) {
				parts = append(parts, fmt.Sprintf("%s@%d/%d", key, m.Partition, m.Offset))
			}
			sort.Strings(parts)
			return strings.Join(parts, ",")
		},
		Objects: func(n int) int { return n },
	})
	// Every key of east ends in a purge tombstone, in the partition of its records.
	for key, msgs := range kcatAll(t, broker.Addr, topic) {
		last := msgs[len(msgs)-1]
		if last.header(hCluster) != "east" {
			continue
		}
		if last.Payload != nil || last.header(hEvent) != evPurge {
			t.Fatalf("key %s ends in %v, want a purge tombstone", key, last)
		}
		for _, m := range msgs {
			if m.Partition != last.Partition {
				t.Fatalf("key %s: records in partitions %d and %d", key, m.Partition, last.Partition)
			}
		}
	}
}
