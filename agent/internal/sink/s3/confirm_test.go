package s3

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/api/v1alpha1"
)

// etags maps every key of the bucket to its ETag, as the server reports them.
func etags(t *testing.T, bucket string) map[string]string {
	t.Helper()
	out, err := client().ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: &bucket})
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, o := range out.Contents {
		m[aws.ToString(o.Key)] = aws.ToString(o.ETag)
	}
	return m
}

// TestConfirmRewritesOnlyTheManifest: a confirmation rewrites the inventory's manifest with a
// new confirmedAt (exportedAt, the last change, stays) and no document; a manifest of another
// checksum is ErrNotHeld and stays as it was.
func TestConfirmRewritesOnlyTheManifest(t *testing.T) {
	bucket := newBucket(t)
	s := newSink(t, "east", bucket, v1alpha1.Serialization{Format: v1alpha1.FormatJSON}, v1alpha1.LayoutPerResource, nil)
	e := &exporter{sink: s}
	e.export(t, row(t, "east", "shop", "web", 2), row(t, "east", "shop", "api", 3))
	before := etags(t, bucket)
	exported := verifyManifest(t, bucket, "east")
	if !exported.ConfirmedAt.Equal(exported.ExportedAt) {
		t.Fatalf("an export confirms: confirmedAt %v, exportedAt %v", exported.ConfirmedAt, exported.ExportedAt)
	}

	at := exported.ExportedAt.Add(5 * time.Minute)
	if err := s.Confirm(context.Background(), sink.Confirmation{Cluster: "east", Inventory: "workloads", Checksum: e.prev.Checksum, At: at}); err != nil {
		t.Fatal(err)
	}
	after := etags(t, bucket)
	manifest := "fleet/east/workloads.manifest.json"
	for k, tag := range before {
		if changed := after[k] != tag; changed != (k == manifest) {
			t.Errorf("%s: changed=%v by a confirmation (only the manifest may change)", k, changed)
		}
	}
	m := verifyManifest(t, bucket, "east")
	if !m.ConfirmedAt.Equal(at.UTC()) || !m.ExportedAt.Equal(exported.ExportedAt) || m.Checksum != exported.Checksum {
		t.Fatalf("after the confirmation: %+v", m)
	}

	err := s.Confirm(context.Background(), sink.Confirmation{Cluster: "east", Inventory: "workloads", Checksum: "sha256:other", At: at.Add(time.Minute)})
	if !errors.Is(err, sink.ErrNotHeld) {
		t.Fatalf("confirming another checksum: %v, want ErrNotHeld", err)
	}
	if err := s.Confirm(context.Background(), sink.Confirmation{Cluster: "west", Inventory: "workloads", Checksum: e.prev.Checksum, At: at}); !errors.Is(err, sink.ErrNotHeld) {
		t.Fatalf("confirming without a manifest: %v, want ErrNotHeld", err)
	}
	if got := etags(t, bucket); got[manifest] != after[manifest] || len(got) != len(after) {
		t.Fatal("a refused confirmation wrote")
	}
}

// TestManifestNamesItsWriter: against versitygw (a stand-in for S3), the manifest names the
// agent version and instance of the last export or confirmation, and no data object does; an
// upgraded agent that confirms, or re-sends the same snapshot in full (a resync after losing
// its state), renames the writer without rewriting a data object (their ETags stay).
func TestManifestNamesItsWriter(t *testing.T) {
	bucket := newBucket(t)
	ser := v1alpha1.Serialization{Format: v1alpha1.FormatParquet}
	s := newSink(t, "east", bucket, ser, v1alpha1.LayoutByNamespace, nil)
	v1 := export.Writer{Version: "v0.1.0", Instance: "kollect-system@4f9c"}
	e := &exporter{sink: s, writer: v1}
	rows := []export.Row{row(t, "east", "shop", "web", 2), row(t, "east", "shop", "api", 3), row(t, "east", "ops", "probe", 1)}
	e.export(t, rows...)
	manifest := "fleet/east/workloads.manifest.json"
	if m := verifyManifest(t, bucket, "east"); m.Writer != v1 {
		t.Fatalf("after an export the manifest names %+v, want %+v", m.Writer, v1)
	}
	before := etags(t, bucket)
	if len(before) != 3 { // two namespaces' documents and the manifest
		t.Fatalf("stored %v", before)
	}
	for k := range before {
		if k != manifest && bytes.Contains(get(t, bucket, k), []byte(v1.Instance)) {
			t.Errorf("%s names the writer", k)
		}
	}

	v2 := export.Writer{Version: "v0.2.0", Instance: v1.Instance}
	at := time.Now().UTC().Truncate(time.Second)
	if err := s.Confirm(context.Background(), sink.Confirmation{Cluster: "east", Inventory: "workloads", Checksum: e.prev.Checksum, At: at, Writer: v2}); err != nil {
		t.Fatal(err)
	}
	if m := verifyManifest(t, bucket, "east"); m.Writer != v2 || !m.ConfirmedAt.Equal(at) {
		t.Fatalf("after the upgraded agent's confirmation the manifest names %+v (confirmedAt %v), want %+v", m.Writer, m.ConfirmedAt, v2)
	}
	confirmed := etags(t, bucket)
	restarted := &exporter{sink: s, writer: v2}
	b := restarted.batch(rows...)
	b.Resync = true
	if err := s.Export(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	after := etags(t, bucket)
	for k, tag := range before {
		if k != manifest && after[k] != tag {
			t.Errorf("%s: the upgraded agent rewrote a data object (ETag %s -> %s)", k, tag, after[k])
		}
	}
	if after[manifest] != confirmed[manifest] || len(after) != len(before) {
		t.Errorf("the upgraded agent's re-send of the same snapshot wrote: %v -> %v", confirmed, after)
	}
}
