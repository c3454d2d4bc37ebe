package gcs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/api/v1alpha1"
)

// generations maps every object of the bucket to its generation, as the emulator reports it.
func generations(t *testing.T, bucket string) map[string]string {
	t.Helper()
	var out struct {
		Items []struct{ Name, Generation string } `json:"items"`
	}
	if err := json.Unmarshal(api(t, "GET", "/storage/v1/b/"+bucket+"/o", nil), &out); err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, it := range out.Items {
		m[it.Name] = it.Generation
	}
	return m
}

// TestConfirmRewritesOnlyTheManifest: against the GCS emulator (a stand-in for GCS), a
// confirmation writes a new generation of the manifest with a new confirmedAt and none of any
// document; another checksum is ErrNotHeld.
func TestConfirmRewritesOnlyTheManifest(t *testing.T) {
	bucket := newBucket(t)
	s := newSink(t, "east", bucket, server.Endpoint, v1alpha1.Serialization{Format: v1alpha1.FormatJSON}, v1alpha1.LayoutPerResource)
	e := &exporter{sink: s}
	e.export(t, row(t, "east", "shop", "web", 2), row(t, "east", "shop", "api", 3))
	before := generations(t, bucket)
	exported := verifyManifest(t, bucket, "east")
	at := exported.ExportedAt.Add(5 * time.Minute)
	if err := s.Confirm(context.Background(), sink.Confirmation{Cluster: "east", Inventory: "workloads", Checksum: e.prev.Checksum, At: at}); err != nil {
		t.Fatal(err)
	}
	manifest := "inv/east/workloads.manifest.json"
	after := generations(t, bucket)
	for k, g := range before {
		if changed := after[k] != g; changed != (k == manifest) {
			t.Errorf("%s: changed=%v by a confirmation (only the manifest may change)", k, changed)
		}
	}
	if m := verifyManifest(t, bucket, "east"); !m.ConfirmedAt.Equal(at.UTC()) || !m.ExportedAt.Equal(exported.ExportedAt) {
		t.Fatalf("after the confirmation: confirmedAt %v exportedAt %v", m.ConfirmedAt, m.ExportedAt)
	}
	if err := s.Confirm(context.Background(), sink.Confirmation{Cluster: "east", Inventory: "workloads", Checksum: "sha256:other", At: at}); !errors.Is(err, sink.ErrNotHeld) {
		t.Fatalf("confirming another checksum: %v, want ErrNotHeld", err)
	}
}

// TestManifestNamesItsWriter: against the GCS emulator, the manifest names the agent version
// and instance of the last export or confirmation, and no data object does; an upgraded agent
// that confirms, or re-sends the same snapshot in full (a resync after losing its state),
// renames the writer without writing a new generation of any data object.
func TestManifestNamesItsWriter(t *testing.T) {
	bucket := newBucket(t)
	s := newSink(t, "east", bucket, server.Endpoint, v1alpha1.Serialization{Format: v1alpha1.FormatYAML}, v1alpha1.LayoutByNamespace)
	v1 := export.Writer{Version: "v0.1.0", Instance: "kollect-system@4f9c"}
	e := &exporter{sink: s, writer: v1}
	rows := []export.Row{row(t, "east", "shop", "web", 2), row(t, "east", "shop", "api", 3), row(t, "east", "ops", "probe", 1)}
	e.export(t, rows...)
	manifest := "inv/east/workloads.manifest.json"
	if m := verifyManifest(t, bucket, "east"); m.Writer != v1 {
		t.Fatalf("after an export the manifest names %+v, want %+v", m.Writer, v1)
	}
	before := generations(t, bucket)
	if len(before) != 3 { // two namespaces' documents and the manifest
		t.Fatalf("stored %v", before)
	}
	for k := range before {
		if k != manifest && bytes.Contains(download(t, bucket, k), []byte(v1.Instance)) {
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
	confirmed := generations(t, bucket)
	restarted := &exporter{sink: s, writer: v2, resync: true}
	restarted.export(t, rows...)
	after := generations(t, bucket)
	for k, g := range before {
		if k != manifest && after[k] != g {
			t.Errorf("%s: the upgraded agent rewrote a data object (generation %s -> %s)", k, g, after[k])
		}
	}
	if after[manifest] != confirmed[manifest] || len(after) != len(before) {
		t.Errorf("the upgraded agent's re-send of the same snapshot wrote: %v -> %v", confirmed, after)
	}
}
