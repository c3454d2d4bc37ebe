package azureblob

import (
	"context"
	"errors"
	"strings"
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
func heldIn(t *testing.T, cont, cluster string) [3]int64 {
	t.Helper()
	return sinktest.ObjectsHeld(t, names(t, cont), "inv/"+cluster+"/", func(n string) []byte { return download(t, cont, n) })
}

// fingerprintOf is every object of cluster with its version, as the server lists them.
func fingerprintOf(t *testing.T, cont, cluster string) string {
	t.Helper()
	return sinktest.ObjectsFingerprint(etags(t, cont), "inv/"+cluster+"/")
}

// TestPurgeRemovesOneClusterOnly runs the purge contract against the Azure Storage emulator
// (a stand-in for Azure Blob Storage): no blob of the other cluster changes its ETag.
func TestPurgeRemovesOneClusterOnly(t *testing.T) {
	cont := newContainer(t)
	sinks := map[string]*Sink{}
	for _, c := range []string{"east", "west"} {
		sinks[c] = newSink(t, c, cont, v1alpha1.Serialization{}, v1alpha1.LayoutPerResource, "sas")
	}
	sinktest.PurgeContract(t, sinktest.PurgeCase{East: sinks["east"], West: sinks["west"], Precision: time.Nanosecond,
		Export: func(cluster, inventory string, n int, at time.Time) {
			exportAt(t, sinks[cluster], cluster, inventory, n, at)
		},
		Held:        func(cluster string) [3]int64 { return heldIn(t, cont, cluster) },
		Fingerprint: func(cluster string) string { return fingerprintOf(t, cont, cluster) },
		Objects:     func(n int) int { return n },
	})
}

// TestPurgeLeavesAManifestRewrittenMeanwhile: the manifest's delete carries If-Match on the
// ETag read, so one its agent rewrote since stays.
func TestPurgeLeavesAManifestRewrittenMeanwhile(t *testing.T) {
	ctx := context.Background()
	cont := newContainer(t)
	s := newSink(t, "east", cont, v1alpha1.Serialization{}, v1alpha1.LayoutDocument, "key")
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
	if got := heldIn(t, cont, "east"); got != [3]int64{1, 1, 1} {
		t.Fatalf("east holds %v after the refused delete", got)
	}
}

// TestOpenURL opens the container as kollect sinks purge does: ACCOUNT/CONTAINER/PREFIX with
// the credential from the environment, the emulator's URL in endpoint.
func TestOpenURL(t *testing.T) {
	ctx := context.Background()
	cont := newContainer(t)
	exportAt(t, newSink(t, "east", cont, v1alpha1.Serialization{}, v1alpha1.LayoutDocument, "sas"), "east", "apps", 2, time.Now().Add(-2*time.Hour))
	t.Setenv(EnvSASToken, server.AccountSAS("rdl"))
	s, err := OpenURL(ctx, server.Account+"/"+cont+"/inv", server.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	if hs, err := s.Holdings(ctx, "east", ""); err != nil || len(hs) != 1 || hs[0].Rows != 2 || hs[0].Objects != 1 {
		t.Fatalf("holdings through OpenURL: %+v, %v", hs, err)
	}
	t.Setenv(EnvAccountKey, server.Key)
	if _, err := OpenURL(ctx, server.Account+"/"+cont, server.Endpoint); err == nil || !strings.Contains(err.Error(), "keep one") {
		t.Fatalf("both credentials set: %v", err)
	}
	t.Setenv(EnvSASToken, "")
	if _, err := OpenURL(ctx, server.Account+"/"+cont, server.Endpoint); err != nil {
		t.Fatalf("the account key: %v", err)
	}
	if _, err := OpenURL(ctx, "https://x.blob.core.windows.net/c", ""); err == nil || !strings.Contains(err.Error(), "ACCOUNT/CONTAINER") {
		t.Fatalf("a URL instead of ACCOUNT/CONTAINER: %v", err)
	}
}
