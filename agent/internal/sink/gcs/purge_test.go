package gcs

import (
	"context"
	"errors"
	"testing"
	"time"

	"kollect.dev/agent/internal/sink/sinktest"
	"kollect.dev/agent/internal/sink/snapshot"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

// exportAt seeds cluster's inventory with n Deployments at the time at.
func exportAt(t *testing.T, s *Sink, cluster, inventory string, n int, at time.Time) {
	t.Helper()
	sinktest.ExportDeploymentsAt(t, s, cluster, inventory, n, at)
}

// heldIn counts, with the test's own client, a cluster's documents under the sink's prefix,
// the coverage entries its manifests list and its manifests.
func heldIn(t *testing.T, bucket, cluster string) [3]int64 {
	t.Helper()
	return sinktest.ObjectsHeld(t, names(t, bucket), "inv/"+cluster+"/", func(n string) []byte { return download(t, bucket, n) })
}

// fingerprintOf is every object of cluster with its version, as the server lists them.
func fingerprintOf(t *testing.T, bucket, cluster string) string {
	t.Helper()
	return sinktest.ObjectsFingerprint(generations(t, bucket), "inv/"+cluster+"/")
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
