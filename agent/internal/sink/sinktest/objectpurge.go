package sinktest

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"testing"
	"time"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/snapshot"
)

// ExportDeploymentsAt exports n Deployments of cluster's inventory through s, one document
// each, with their coverage entry, as the agent kollect-system@<cluster> did at the time at:
// the object stores' purge tests seed two clusters this way.
func ExportDeploymentsAt(t *testing.T, s sink.Sink, cluster, inventory string, n int, at time.Time) {
	t.Helper()
	snap := export.NewSnapshot(Deployments(cluster, inventory, n, 1))
	b := &sink.Batch{Envelope: export.Envelope{SchemaVersion: export.SchemaVersion, Cluster: cluster, Inventory: inventory,
		Generation: 1, ExportedAt: at, ItemCount: snap.Len(), Checksum: snap.Checksum, Rows: snap.Rows,
		Writer:   export.Writer{Version: "v0.1.0", Instance: "kollect-system@" + cluster},
		Coverage: []export.Coverage{Complete("deployments", int64(n))}}, Diff: export.Compute(nil, snap)}
	if err := s.Export(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

// ObjectsHeld counts, among an object store's names (listed by the test's own client, never
// the sink's), those under prefix: documents, the coverage entries their manifests list (read
// with read), and manifests.
func ObjectsHeld(t *testing.T, names []string, prefix string, read func(name string) []byte) [3]int64 {
	t.Helper()
	var out [3]int64
	for _, n := range names {
		path, ok := strings.CutPrefix(n, prefix)
		switch {
		case !ok:
		case strings.HasSuffix(path, ".manifest.json"):
			var m snapshot.Manifest
			if err := json.Unmarshal(read(n), &m); err != nil {
				t.Fatal(err)
			}
			out[1] += int64(len(m.Coverage))
			out[2]++
		default:
			out[0]++
		}
	}
	return out
}

// ObjectsFingerprint joins every name under prefix with its version (an ETag, a generation),
// in name order: a rewrite or removal of any of them changes it.
func ObjectsFingerprint(versions map[string]string, prefix string) string {
	var parts []string
	for n, v := range versions {
		if strings.HasPrefix(n, prefix) {
			parts = append(parts, n+"@"+v)
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}
