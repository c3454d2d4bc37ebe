package s3

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
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

func forbidden(target string, rows int64) export.Coverage {
	return export.Coverage{Target: target, State: v1alpha1.CoverageForbidden, Rows: rows,
		Reason: `cronjobs.batch is forbidden: User "system:serviceaccount:kollect:agent" cannot list resource "cronjobs"`}
}

// onlyManifestChanged fails unless, between two listings of the bucket, exactly the manifest's
// ETag changed (wantManifest) or nothing did.
func onlyManifestChanged(t *testing.T, before, after map[string]string, manifest string, wantManifest bool) {
	t.Helper()
	if len(before) != len(after) {
		t.Fatalf("objects %v -> %v", before, after)
	}
	for k, tag := range before {
		if changed := after[k] != tag; changed != (wantManifest && k == manifest) {
			t.Errorf("%s: changed=%v (ETag %s -> %s)", k, changed, tag, after[k])
		}
	}
}

// TestCoverageOnlyRewritesTheManifest: against versitygw, the manifest records the batch's
// coverage; a batch that changes only the coverage (same checksum, empty diff, a target
// turned forbidden and its rows kept) rewrites the manifest alone, every data object keeping
// its ETag; the same batch again writes nothing, not even the manifest; a resync with a new
// coverage rewrites the manifest alone too; a confirmation keeps the coverage.
func TestCoverageOnlyRewritesTheManifest(t *testing.T) {
	ctx := context.Background()
	bucket := newBucket(t)
	s := newSink(t, "east", bucket, v1alpha1.Serialization{Format: v1alpha1.FormatJSON}, v1alpha1.LayoutByNamespace, nil)
	v1 := export.Writer{Version: "v0.3.0", Instance: "kollect@1"}
	e := &exporter{sink: s, writer: v1, coverage: []export.Coverage{complete("apps/crons", 0), complete("apps/deploys", 3)}}
	rows := []export.Row{row(t, "east", "shop", "web", 2), row(t, "east", "shop", "api", 3), row(t, "east", "ops", "probe", 1)}
	e.export(t, rows...)
	manifest := "fleet/east/workloads.manifest.json"
	first := verifyManifest(t, bucket, "east")
	if !slices.Equal(first.Coverage, e.coverage) {
		t.Fatalf("manifest coverage %+v, want %+v", first.Coverage, e.coverage)
	}
	before := etags(t, bucket)
	if len(before) != 3 { // two namespaces' documents and the manifest
		t.Fatalf("stored %v", before)
	}

	e.coverage = []export.Coverage{forbidden("apps/crons", 0), complete("apps/deploys", 3)}
	e.writer = export.Writer{Version: "v0.3.1", Instance: v1.Instance}
	st := e.export(t, rows...)
	if st.Written != 0 || st.Deleted != 0 || !st.ManifestWritten {
		t.Fatalf("coverage-only export: %+v, want the manifest alone", st)
	}
	after := etags(t, bucket)
	onlyManifestChanged(t, before, after, manifest, true)
	m := verifyManifest(t, bucket, "east")
	if !slices.Equal(m.Coverage, e.coverage) || m.Checksum != first.Checksum || !reflect.DeepEqual(m.Files, first.Files) {
		t.Fatalf("after the coverage-only export: coverage %+v checksum %s files %+v", m.Coverage, m.Checksum, m.Files)
	}
	if !m.ExportedAt.Equal(first.ExportedAt) || !m.ConfirmedAt.Equal(first.ConfirmedAt) {
		t.Errorf("exportedAt %v -> %v, confirmedAt %v -> %v: no document changed and a forbidden target is not confirmed",
			first.ExportedAt, m.ExportedAt, first.ConfirmedAt, m.ConfirmedAt)
	}
	if m.Writer != e.writer {
		t.Errorf("writer %+v, want %+v", m.Writer, e.writer)
	}

	if st := e.export(t, rows...); st.ManifestWritten || st.Written != 0 {
		t.Fatalf("unchanged export: %+v", st)
	}
	onlyManifestChanged(t, after, etags(t, bucket), manifest, false)

	// A periodic resync that finds the documents current but the coverage changed.
	e.coverage = []export.Coverage{complete("apps/crons", 0), complete("apps/deploys", 3)}
	b := e.batch(rows...)
	b.Resync = true
	if err := s.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	resynced := etags(t, bucket)
	onlyManifestChanged(t, after, resynced, manifest, true)
	m = verifyManifest(t, bucket, "east")
	if !slices.Equal(m.Coverage, e.coverage) || !m.ConfirmedAt.Equal(b.Envelope.ExportedAt.UTC()) || !m.ExportedAt.Equal(first.ExportedAt) {
		t.Fatalf("after the resync: coverage %+v, confirmedAt %v (want %v: every target complete), exportedAt %v",
			m.Coverage, m.ConfirmedAt, b.Envelope.ExportedAt.UTC(), m.ExportedAt)
	}

	at := time.Now().Add(time.Minute).UTC().Truncate(time.Second)
	if err := s.Confirm(ctx, sink.Confirmation{Cluster: "east", Inventory: "workloads", Checksum: e.prev.Checksum, At: at, Writer: e.writer}); err != nil {
		t.Fatal(err)
	}
	onlyManifestChanged(t, resynced, etags(t, bucket), manifest, true)
	if m := verifyManifest(t, bucket, "east"); !slices.Equal(m.Coverage, e.coverage) || !m.ConfirmedAt.Equal(at) {
		t.Fatalf("after a confirmation: coverage %+v, confirmedAt %v", m.Coverage, m.ConfirmedAt)
	}
}

// TestDocumentedCoverageRead runs the read docs/sinks/s3.md documents, "which targets of
// cluster east are complete", with s3cmd (a client of its own) against versitygw.
func TestDocumentedCoverageRead(t *testing.T) {
	bucket := newBucket(t)
	s := newSink(t, "east", bucket, v1alpha1.Serialization{Format: v1alpha1.FormatNDJSON}, v1alpha1.LayoutDocument, nil)
	e := &exporter{sink: s, coverage: []export.Coverage{forbidden("apps/crons", 2), complete("apps/deploys", 1), complete("ops/deploys", 1)}}
	e.export(t, row(t, "east", "shop", "web", 2), row(t, "east", "ops", "probe", 1))

	line := sinktest.DocCommand(t, "s3.md", "| jq")
	documented := "s3://fleet-inventory/kollect/east/pods.manifest.json"
	if !strings.Contains(line, documented) {
		t.Fatalf("the documented read no longer names %s: %s", documented, line)
	}
	line = strings.Replace(line, documented, "s3://"+bucket+"/fleet/east/workloads.manifest.json", 1)
	home := t.TempDir()
	host := strings.TrimPrefix(server.Endpoint, "http://")
	cfg := fmt.Sprintf("[default]\naccess_key = %s\nsecret_key = %s\nhost_base = %s\nhost_bucket = %s\nuse_https = False\nbucket_location = %s\nsignature_v2 = False\n",
		server.AccessKey, server.SecretKey, host, host, server.Region)
	if err := os.WriteFile(filepath.Join(home, ".s3cfg"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, want := sinktest.Shell(t, home, []string{"HOME=" + home}, line), "apps/deploys\nops/deploys\n"; got != want {
		t.Fatalf("%s\nprints %q, want %q", line, got, want)
	}
}
