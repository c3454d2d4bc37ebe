package gcs

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
	"kollect.dev/agent/internal/sink/snapshot"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

// exportAt exports n Deployments of cluster's inventory, one document each, with their
// coverage entry, as the agent kollect-system@<cluster> did at the time at.
func exportAt(t *testing.T, s *Sink, cluster, inventory string, n int, at time.Time) {
	t.Helper()
	snap := export.NewSnapshot(sinktest.Deployments(cluster, inventory, n, 1))
	b := &sink.Batch{Envelope: export.Envelope{SchemaVersion: export.SchemaVersion, Cluster: cluster, Inventory: inventory,
		Generation: 1, ExportedAt: at, ItemCount: snap.Len(), Checksum: snap.Checksum, Rows: snap.Rows,
		Writer:   export.Writer{Version: "v0.1.0", Instance: "kollect-system@" + cluster},
		Coverage: []export.Coverage{sinktest.Complete("deployments", int64(n))}}, Diff: export.Compute(nil, snap)}
	if err := s.Export(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

// heldIn counts, through the emulator's JSON API, a cluster's documents under the sink's
// prefix, the coverage entries its manifests list and its manifests.
func heldIn(t *testing.T, bucket, cluster string) [3]int64 {
	t.Helper()
	var out [3]int64
	for _, n := range names(t, bucket) {
		path, ok := strings.CutPrefix(n, "inv/"+cluster+"/")
		switch {
		case !ok:
		case strings.HasSuffix(path, ".manifest.json"):
			var m snapshot.Manifest
			if err := json.Unmarshal(download(t, bucket, n), &m); err != nil {
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

// fingerprintOf is every object of cluster with its generation, as the emulator lists them.
func fingerprintOf(t *testing.T, bucket, cluster string) string {
	t.Helper()
	var parts []string
	for n, gen := range generations(t, bucket) {
		if strings.HasPrefix(n, "inv/"+cluster+"/") {
			parts = append(parts, n+"@"+gen)
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// TestPurgeRemovesOneClusterOnly runs the purge contract against the GCS emulator (a stand-in
// for GCS): no object of the other cluster changes its generation.
func TestPurgeRemovesOneClusterOnly(t *testing.T) {
	bucket := newBucket(t)
	sinks := map[string]*Sink{}
	for _, c := range []string{"east", "west"} {
		sinks[c] = newSink(t, c, bucket, server.Endpoint, v1alpha1.Serialization{}, v1alpha1.LayoutPerResource)
	}
	sinktest.PurgeContract(t, sinktest.PurgeCase{East: sinks["east"], West: sinks["west"], Precision: time.Nanosecond,
		Export: func(cluster, inventory string, n int, at time.Time) {
			exportAt(t, sinks[cluster], cluster, inventory, n, at)
		},
		Held:        func(cluster string) [3]int64 { return heldIn(t, bucket, cluster) },
		Fingerprint: func(cluster string) string { return fingerprintOf(t, bucket, cluster) },
		Objects:     func(n int) int { return n },
	})
}

// TestPurgeLeavesAManifestRewrittenMeanwhile: the manifest's delete is conditional on the
// generation read, so one its agent rewrote since stays.
func TestPurgeLeavesAManifestRewrittenMeanwhile(t *testing.T) {
	ctx := context.Background()
	bucket := newBucket(t)
	s := newSink(t, "east", bucket, server.Endpoint, v1alpha1.Serialization{}, v1alpha1.LayoutDocument)
	exportAt(t, s, "east", "apps", 2, time.Now().Add(-2*time.Hour))
	key := s.key(snapshot.ManifestPath("east", "apps"))
	_, gen, err := s.readManifest(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	exportAt(t, s, "east", "apps", 3, time.Now()) // the agent is back
	if err := s.deleteManifest(ctx, key, gen); !errors.Is(err, snapshot.ErrManifestChanged) {
		t.Fatalf("deleting a manifest rewritten since it was read: %v, want ErrManifestChanged", err)
	}
	if got := heldIn(t, bucket, "east"); got != [3]int64{1, 1, 1} {
		t.Fatalf("east holds %v after the refused delete", got)
	}
}
