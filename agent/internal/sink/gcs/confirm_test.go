package gcs

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

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
