package gcs

import (
	"context"
	"errors"
	"testing"
	"time"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/api/v1alpha1"
)

// TestSecondWriterIsRefused: against the GCS emulator (a stand-in for GCS), a second agent of
// cluster "east" is refused while the manifest's writer is live: no document gets a new
// generation, the manifest gains only the contender mark, and the holder's next confirmation
// reports the contention.
func TestSecondWriterIsRefused(t *testing.T) {
	ctx := context.Background()
	bucket := newBucket(t)
	ser := v1alpha1.Serialization{Format: v1alpha1.FormatJSON}
	w1 := export.Writer{Version: "v1.0.0", Instance: "kollect@1111"}
	w2 := export.Writer{Version: "v1.1.0", Instance: "kollect@2222"}
	first := &exporter{sink: newSink(t, "east", bucket, server.Endpoint, ser, v1alpha1.LayoutPerResource), writer: w1}
	second := newSink(t, "east", bucket, server.Endpoint, ser, v1alpha1.LayoutPerResource)
	first.export(t, row(t, "east", "shop", "web", 2), row(t, "east", "shop", "api", 3))
	before := generations(t, bucket)
	const window = time.Minute
	manifest := "inv/east/workloads.manifest.json"

	snap := export.NewSnapshot([]export.Row{row(t, "east", "shop", "web", 7)})
	b := &sink.Batch{Envelope: export.Envelope{SchemaVersion: export.SchemaVersion, Cluster: "east", Inventory: "workloads",
		Generation: 1, ExportedAt: time.Now(), ItemCount: snap.Len(), Checksum: snap.Checksum, Rows: snap.Rows, Writer: w2},
		Diff: export.Compute(nil, snap), ConflictWindow: window}
	var conflict *sink.WriterConflictError
	if err := second.Export(ctx, b); !errors.As(err, &conflict) || conflict.Holder != w1 {
		t.Fatalf("the second writer's export: %v, want a WriterConflictError naming %v", err, w1)
	}
	after := generations(t, bucket)
	for k, g := range before {
		if changed := after[k] != g; changed != (k == manifest) {
			t.Errorf("%s: changed=%v by a refused export (only the manifest's contender mark may change)", k, changed)
		}
	}
	m := verifyManifest(t, bucket, "east")
	if m.Writer != w1 || m.Contender != w2 {
		t.Fatalf("after the refusal the manifest names writer %v and contender %v", m.Writer, m.Contender)
	}
	err := first.sink.Confirm(ctx, sink.Confirmation{Cluster: "east", Inventory: "workloads", Checksum: m.Checksum,
		At: time.Now(), Writer: w1, ConflictWindow: window})
	if !errors.Is(err, sink.ErrContended) {
		t.Fatalf("the holder's confirmation: %v, want ErrContended", err)
	}
}
