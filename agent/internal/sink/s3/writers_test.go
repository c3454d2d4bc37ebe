package s3

import (
	"context"
	"errors"
	"testing"
	"time"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/api/v1alpha1"
)

// TestSecondWriterIsRefused: against versitygw (a stand-in for S3), two agents of cluster
// "east" (two instances) export one inventory into one bucket. The second's export and
// confirmation are refused with ErrWriterConflict and write nothing but the contender mark in
// the manifest (every data object keeps its ETag); the first's next confirmation succeeds and
// reports the contention. Once the first has not written for the window, the second takes over.
func TestSecondWriterIsRefused(t *testing.T) {
	ctx := context.Background()
	bucket := newBucket(t)
	ser := v1alpha1.Serialization{Format: v1alpha1.FormatJSON}
	w1 := export.Writer{Version: "v1.0.0", Instance: "kollect@1111"}
	w2 := export.Writer{Version: "v1.1.0", Instance: "kollect@2222"}
	first := &exporter{sink: newSink(t, "east", bucket, ser, v1alpha1.LayoutPerResource, nil), writer: w1}
	second := &exporter{sink: newSink(t, "east", bucket, ser, v1alpha1.LayoutPerResource, nil), writer: w2}
	first.export(t, row(t, "east", "shop", "web", 2), row(t, "east", "shop", "api", 3))
	before := etags(t, bucket)
	const window = time.Minute
	manifest := "fleet/east/workloads.manifest.json"

	b := second.batch(row(t, "east", "shop", "web", 7))
	b.ConflictWindow = window
	err := second.sink.Export(ctx, b)
	var conflict *sink.WriterConflictError
	if !errors.As(err, &conflict) || conflict.Holder != w1 || sink.ClassOf(err) != sink.Terminal {
		t.Fatalf("the second writer's export: %v, want a terminal WriterConflictError naming %v", err, w1)
	}
	after := etags(t, bucket)
	for k, tag := range before {
		if changed := after[k] != tag; changed != (k == manifest) {
			t.Errorf("%s: changed=%v by a refused export (only the manifest's contender mark may change)", k, changed)
		}
	}
	m := verifyManifest(t, bucket, "east")
	if m.Writer != w1 || m.Contender != w2 || m.ContendedAt.IsZero() {
		t.Fatalf("after the refusal the manifest names writer %v and contender %v at %v", m.Writer, m.Contender, m.ContendedAt)
	}
	err = second.sink.Confirm(ctx, sink.Confirmation{Cluster: "east", Inventory: "workloads", Checksum: m.Checksum,
		At: time.Now(), Writer: w2, ConflictWindow: window})
	if !errors.Is(err, sink.ErrWriterConflict) {
		t.Fatalf("the second writer's confirmation: %v, want ErrWriterConflict", err)
	}

	// The holder confirms: it succeeds, says another instance was refused, and keeps the mark.
	err = first.sink.Confirm(ctx, sink.Confirmation{Cluster: "east", Inventory: "workloads", Checksum: m.Checksum,
		At: time.Now(), Writer: w1, ConflictWindow: window})
	var contended *sink.ContendedError
	if !errors.As(err, &contended) || contended.Contender != w2 {
		t.Fatalf("the holder's confirmation: %v, want a ContendedError naming %v", err, w2)
	}
	if m := verifyManifest(t, bucket, "east"); m.Writer != w1 || m.Contender != w2 || !m.ConfirmedAt.After(m.ExportedAt) {
		t.Fatalf("after the holder's confirmation: writer %v, contender %v, confirmed %v, exported %v", m.Writer, m.Contender, m.ConfirmedAt, m.ExportedAt)
	}

	// The holder stops: a window after its last write, the second takes over.
	b = second.batch(row(t, "east", "shop", "web", 7))
	b.ConflictWindow = window
	b.Envelope.ExportedAt = time.Now().Add(2 * window)
	if err := second.sink.Export(ctx, b); err != nil {
		t.Fatalf("taking over from a writer gone for the window: %v", err)
	}
	if m := verifyManifest(t, bucket, "east"); m.Writer != w2 || m.ItemCount != 1 {
		t.Fatalf("after the takeover the manifest names %v with %d rows", m.Writer, m.ItemCount)
	}
}
