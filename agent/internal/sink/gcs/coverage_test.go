package gcs

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
	"kollect.dev/api/v1alpha1"
)

func complete(target string, rows int64) export.Coverage {
	return export.Coverage{Target: target, State: v1alpha1.CoverageComplete, Rows: rows}
}

func notServed(target string, rows int64) export.Coverage {
	return export.Coverage{Target: target, State: v1alpha1.CoverageKindNotServed, Rows: rows,
		Reason: "the cluster does not serve batch/v1beta1 CronJob"}
}

// onlyManifestChanged fails unless, between two listings of the bucket, exactly the manifest's
// generation changed (wantManifest) or nothing did.
func onlyManifestChanged(t *testing.T, before, after map[string]string, manifest string, wantManifest bool) {
	t.Helper()
	if len(before) != len(after) {
		t.Fatalf("objects %v -> %v", before, after)
	}
	for k, g := range before {
		if changed := after[k] != g; changed != (wantManifest && k == manifest) {
			t.Errorf("%s: changed=%v (generation %s -> %s)", k, changed, g, after[k])
		}
	}
}

// TestCoverageOnlyRewritesTheManifest: against the GCS emulator, the manifest records the
// batch's coverage; a batch that changes only the coverage writes a new generation of the
// manifest and of no document; the same batch again writes nothing; a confirmation keeps the
// coverage.
func TestCoverageOnlyRewritesTheManifest(t *testing.T) {
	bucket := newBucket(t)
	s := newSink(t, "east", bucket, server.Endpoint, v1alpha1.Serialization{Format: v1alpha1.FormatCSV}, v1alpha1.LayoutByNamespace)
	e := &exporter{sink: s, coverage: []export.Coverage{complete("apps/crons", 0), complete("apps/deploys", 3)}}
	rows := []export.Row{row(t, "east", "shop", "web", 2), row(t, "east", "shop", "api", 3), row(t, "east", "ops", "probe", 1)}
	e.export(t, rows...)
	manifest := "inv/east/workloads.manifest.json"
	first := verifyManifest(t, bucket, "east")
	if !slices.Equal(first.Coverage, e.coverage) {
		t.Fatalf("manifest coverage %+v, want %+v", first.Coverage, e.coverage)
	}
	before := generations(t, bucket)
	if len(before) != 3 {
		t.Fatalf("stored %v", before)
	}

	e.coverage = []export.Coverage{notServed("apps/crons", 0), complete("apps/deploys", 3)}
	if st := e.export(t, rows...); st.Written != 0 || st.Deleted != 0 || !st.ManifestWritten {
		t.Fatalf("coverage-only export: %+v, want the manifest alone", st)
	}
	after := generations(t, bucket)
	onlyManifestChanged(t, before, after, manifest, true)
	m := verifyManifest(t, bucket, "east")
	if !slices.Equal(m.Coverage, e.coverage) || m.Checksum != first.Checksum || !m.ExportedAt.Equal(first.ExportedAt) {
		t.Fatalf("after the coverage-only export: coverage %+v checksum %s exportedAt %v", m.Coverage, m.Checksum, m.ExportedAt)
	}

	if st := e.export(t, rows...); st.ManifestWritten || st.Written != 0 {
		t.Fatalf("unchanged export: %+v", st)
	}
	onlyManifestChanged(t, after, generations(t, bucket), manifest, false)

	at := time.Now().Add(time.Minute).UTC().Truncate(time.Second)
	if err := s.Confirm(context.Background(), sink.Confirmation{Cluster: "east", Inventory: "workloads", Checksum: e.prev.Checksum, At: at}); err != nil {
		t.Fatal(err)
	}
	if m := verifyManifest(t, bucket, "east"); !slices.Equal(m.Coverage, e.coverage) || !m.ConfirmedAt.Equal(at) {
		t.Fatalf("after a confirmation: coverage %+v, confirmedAt %v", m.Coverage, m.ConfirmedAt)
	}
}

// TestDocumentedCoverageRead runs the read docs/sinks/gcs.md documents, "which targets of
// cluster east are complete", with curl and jq against the emulator's JSON API.
func TestDocumentedCoverageRead(t *testing.T) {
	bucket := newBucket(t)
	s := newSink(t, "east", bucket, server.Endpoint, v1alpha1.Serialization{Format: v1alpha1.FormatNDJSON}, v1alpha1.LayoutDocument)
	e := &exporter{sink: s, coverage: []export.Coverage{notServed("apps/crons", 2), complete("apps/deploys", 1), complete("ops/deploys", 1)}}
	e.export(t, row(t, "east", "shop", "web", 2), row(t, "east", "ops", "probe", 1))

	line := sinktest.DocCommand(t, "gcs.md", "| jq")
	documented := "https://storage.googleapis.com/storage/v1/b/fleet-lake/o/inventory%2Feast%2Fservices.manifest.json"
	if !strings.Contains(line, documented) {
		t.Fatalf("the documented read no longer names %s: %s", documented, line)
	}
	line = strings.Replace(line, documented, server.Endpoint+"/storage/v1/b/"+bucket+"/o/inv%2Feast%2Fworkloads.manifest.json", 1)
	if got, want := sinktest.Shell(t, t.TempDir(), []string{"TOKEN=emulator"}, line), "apps/deploys\nops/deploys\n"; got != want {
		t.Fatalf("%s\nprints %q, want %q", line, got, want)
	}
}
