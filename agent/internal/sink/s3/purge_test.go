package s3

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
	return sinktest.ObjectsHeld(t, keys(t, bucket), "fleet/"+cluster+"/", func(n string) []byte { return get(t, bucket, n) })
}

// fingerprintOf is every object of cluster with its version, as the server lists them.
func fingerprintOf(t *testing.T, bucket, cluster string) string {
	t.Helper()
	return sinktest.ObjectsFingerprint(etags(t, bucket), "fleet/"+cluster+"/")
}

// TestPurgeRemovesOneClusterOnly runs the purge contract against versitygw: Holdings reads the
// manifests and counts the documents; the purge removes the cluster's documents and
// manifests, per inventory, and no key of the other cluster changes its ETag.
func TestPurgeRemovesOneClusterOnly(t *testing.T) {
	bucket := newBucket(t)
	sinks := map[string]*Sink{}
	for _, c := range []string{"east", "west"} {
		sinks[c] = newSink(t, c, bucket, v1alpha1.Serialization{}, v1alpha1.LayoutPerResource, nil)
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

// TestPurgeLeavesAManifestRewrittenMeanwhile: a manifest rewritten after Holdings read it
// (its agent came back) is not deleted: the conditional delete fails with
// ErrManifestChanged, and the manifest stays for the agent and a later purge.
func TestPurgeLeavesAManifestRewrittenMeanwhile(t *testing.T) {
	ctx := context.Background()
	bucket := newBucket(t)
	s := newSink(t, "east", bucket, v1alpha1.Serialization{}, v1alpha1.LayoutDocument, nil)
	exportAt(t, s, "east", "apps", 2, time.Now().Add(-2*time.Hour))
	key := s.key(snapshot.ManifestPath("east", "apps"))
	_, etag, err := s.readManifest(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	exportAt(t, s, "east", "apps", 3, time.Now()) // the agent is back
	if err := s.deleteManifest(ctx, key, etag); !errors.Is(err, snapshot.ErrManifestChanged) {
		t.Fatalf("deleting a manifest rewritten since it was read: %v, want ErrManifestChanged", err)
	}
	if got := heldIn(t, bucket, "east"); got != [3]int64{1, 1, 1} {
		t.Fatalf("east holds %v after the refused delete", got)
	}
}
