package azureblob

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

// heldIn counts, through the Blob REST API, a cluster's documents under the sink's prefix,
// the coverage entries its manifests list and its manifests.
func heldIn(t *testing.T, cont, cluster string) [3]int64 {
	t.Helper()
	var out [3]int64
	for _, n := range names(t, cont) {
		path, ok := strings.CutPrefix(n, "inv/"+cluster+"/")
		switch {
		case !ok:
		case strings.HasSuffix(path, ".manifest.json"):
			var m snapshot.Manifest
			if err := json.Unmarshal(download(t, cont, n), &m); err != nil {
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

// fingerprintOf is every blob of cluster with its ETag, as the emulator lists them.
func fingerprintOf(t *testing.T, cont, cluster string) string {
	t.Helper()
	var parts []string
	for n, tag := range etags(t, cont) {
		if strings.HasPrefix(n, "inv/"+cluster+"/") {
			parts = append(parts, n+"@"+tag)
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
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
