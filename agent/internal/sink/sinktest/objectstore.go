package sinktest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/snapshot"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// ObjectSink is an object-store snapshot sink as ObjectStoreContract drives it.
type ObjectSink interface {
	sink.Sink
	sink.Confirmer
	// LastStats describes the latest successful export.
	LastStats() snapshot.Publication
}

// ObjectStore is one fresh bucket or container of an object-store server, as a client the
// sink does not use (the server's REST API by hand) reads it.
type ObjectStore struct {
	// Open builds a sink of cluster onto the store, under Prefix, with the given
	// serialization and layout.
	Open func(cluster string, ser kollectv1.Serialization, mode kollectv1.LayoutMode) ObjectSink
	// Prefix is the sink's prefix, ending in "/", that stored names start with.
	Prefix string
	// Versions maps every stored name to the server's version token of it (an ETag, a
	// generation): it changes whenever the object is written.
	Versions func() map[string]string
	// Read returns a stored object's bytes.
	Read func(name string) []byte
}

// ObjectStoreContract runs, against fresh stores made by fresh, what every object-store
// snapshot sink (s3, gcs, azureblob) guarantees beside its own tests: a second writer of a
// cluster is refused and writes only the contender mark; a confirmation rewrites the manifest
// alone; the manifest names its writer, no document does, and an upgraded agent re-sending
// the same snapshot writes nothing; a coverage-only change rewrites the manifest alone. The
// server's version tokens, not the sink's word, show what was written.
func ObjectStoreContract(t *testing.T, fresh func(t *testing.T) ObjectStore) {
	t.Run("SecondWriterIsRefused", func(t *testing.T) { secondWriterIsRefused(t, fresh(t)) })
	t.Run("ConfirmRewritesOnlyTheManifest", func(t *testing.T) { confirmRewritesOnlyTheManifest(t, fresh(t)) })
	t.Run("ManifestNamesItsWriter", func(t *testing.T) { manifestNamesItsWriter(t, fresh(t)) })
	t.Run("CoverageOnlyRewritesTheManifest", func(t *testing.T) { coverageOnlyRewritesTheManifest(t, fresh(t)) })
}

// manifestName is where the contract's sinks keep east's manifest.
func (st ObjectStore) manifestName() string { return st.Prefix + "east/workloads.manifest.json" }

// objectExporter drives an ObjectSink the way the delivery worker does.
type objectExporter struct {
	sink     ObjectSink
	prev     *export.Snapshot
	gen      int64
	writer   export.Writer
	resync   bool
	coverage []export.Coverage
	window   time.Duration
}

func (e *objectExporter) batch(rows ...export.Row) (*sink.Batch, *export.Snapshot) {
	snap := export.NewSnapshot(append([]export.Row(nil), rows...))
	e.gen++
	b := &sink.Batch{
		Envelope: export.Envelope{SchemaVersion: export.SchemaVersion, Cluster: "east", Inventory: "workloads",
			Generation: e.gen, ExportedAt: time.Now(), ItemCount: snap.Len(), Checksum: snap.Checksum, Rows: snap.Rows,
			Writer: e.writer, Coverage: e.coverage},
		Diff: export.Compute(e.prev, snap), Resync: e.resync, ConflictWindow: e.window,
	}
	if e.prev != nil {
		b.PreviousChecksum = e.prev.Checksum
	}
	return b, snap
}

func (e *objectExporter) export(t *testing.T, rows ...export.Row) snapshot.Publication {
	t.Helper()
	b, snap := e.batch(rows...)
	if err := e.sink.Export(context.Background(), b); err != nil {
		t.Fatalf("export: %v", err)
	}
	e.prev = snap
	return e.sink.LastStats()
}

// workload is a Deployment row of east's inventory "workloads".
func workload(ns, name string, replicas int) export.Row {
	r := Deployment("east", "workloads", 0, map[string]any{"replicas": replicas})
	r.Namespace, r.Name, r.UID = ns, name, "u-"+ns+"-"+name
	return r
}

// manifestOf reads east's manifest and checks every document it lists against its hash.
func manifestOf(t *testing.T, st ObjectStore) *snapshot.Manifest {
	t.Helper()
	m, err := snapshot.ParseManifest(st.Read(st.manifestName()))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range m.Files {
		sum := sha256.Sum256(st.Read(st.Prefix + f.Path))
		if hex.EncodeToString(sum[:]) != f.SHA256 {
			t.Errorf("%s: stored hash differs from the manifest", f.Path)
		}
	}
	return m
}

// onlyManifestChanged fails unless, between two listings, exactly the manifest changed
// (wantManifest) or nothing did, and no object came or went.
func (st ObjectStore) onlyManifestChanged(t *testing.T, before, after map[string]string, wantManifest bool) {
	t.Helper()
	manifestName := st.manifestName()
	if len(before) != len(after) {
		t.Fatalf("objects %v -> %v", before, after)
	}
	for k, v := range before {
		if changed := after[k] != v; changed != (wantManifest && k == manifestName) {
			t.Errorf("%s: changed=%v (%s -> %s)", k, changed, v, after[k])
		}
	}
}

func secondWriterIsRefused(t *testing.T, st ObjectStore) {
	ctx := context.Background()
	ser := kollectv1.Serialization{Format: kollectv1.FormatJSON}
	w1 := export.Writer{Version: "v1.0.0", Instance: "kollect@1111"}
	w2 := export.Writer{Version: "v1.1.0", Instance: "kollect@2222"}
	first := &objectExporter{sink: st.Open("east", ser, kollectv1.LayoutPerResource), writer: w1}
	second := &objectExporter{sink: st.Open("east", ser, kollectv1.LayoutPerResource), writer: w2, window: time.Minute}
	first.export(t, workload("shop", "web", 2), workload("shop", "api", 3))
	before := st.Versions()

	b, _ := second.batch(workload("shop", "web", 7))
	var conflict *sink.WriterConflictError
	if err := second.sink.Export(ctx, b); !errors.As(err, &conflict) || conflict.Holder != w1 || sink.ClassOf(err) != sink.Terminal {
		t.Fatalf("the second writer's export: %v, want a terminal WriterConflictError naming %v", err, w1)
	}
	st.onlyManifestChanged(t, before, st.Versions(), true)
	m := manifestOf(t, st)
	if m.Writer != w1 || m.Contender != w2 {
		t.Fatalf("after the refusal the manifest names writer %v and contender %v", m.Writer, m.Contender)
	}
	marked := st.Versions()
	err := second.sink.Confirm(ctx, sink.Confirmation{Cluster: "east", Inventory: "workloads", Checksum: m.Checksum,
		At: time.Now(), Writer: w2, ConflictWindow: time.Minute})
	if !errors.Is(err, sink.ErrWriterConflict) {
		t.Fatalf("the second writer's confirmation: %v, want ErrWriterConflict", err)
	}
	st.onlyManifestChanged(t, marked, st.Versions(), true) // the mark's time, nothing else
	// The holder confirms: it succeeds, says another instance was refused, and keeps the mark.
	err = first.sink.Confirm(ctx, sink.Confirmation{Cluster: "east", Inventory: "workloads", Checksum: m.Checksum,
		At: time.Now(), Writer: w1, ConflictWindow: time.Minute})
	var contended *sink.ContendedError
	if !errors.As(err, &contended) || contended.Contender != w2 {
		t.Fatalf("the holder's confirmation: %v, want a ContendedError naming %v", err, w2)
	}
	if m := manifestOf(t, st); m.Writer != w1 || m.Contender != w2 || m.ContendedAt.IsZero() || m.Checksum != first.prev.Checksum ||
		!m.ConfirmedAt.After(m.ExportedAt) {
		t.Fatalf("after the holder's confirmation: writer %v, contender %v at %v, checksum %s, confirmed %v, exported %v",
			m.Writer, m.Contender, m.ContendedAt, m.Checksum, m.ConfirmedAt, m.ExportedAt)
	}

	// The holder stops: a window after its last write, the second takes over.
	b, _ = second.batch(workload("shop", "web", 7))
	b.Envelope.ExportedAt = time.Now().Add(2 * time.Minute)
	if err := second.sink.Export(ctx, b); err != nil {
		t.Fatalf("taking over from a writer gone for the window: %v", err)
	}
	if m := manifestOf(t, st); m.Writer != w2 || m.ItemCount != 1 {
		t.Fatalf("after the takeover the manifest names %v with %d rows", m.Writer, m.ItemCount)
	}
}

func confirmRewritesOnlyTheManifest(t *testing.T, st ObjectStore) {
	s := st.Open("east", kollectv1.Serialization{Format: kollectv1.FormatJSON}, kollectv1.LayoutPerResource)
	e := &objectExporter{sink: s}
	e.export(t, workload("shop", "web", 2), workload("shop", "api", 3))
	before := st.Versions()
	exported := manifestOf(t, st)
	if !exported.ConfirmedAt.Equal(exported.ExportedAt) {
		t.Fatalf("an export confirms: confirmedAt %v, exportedAt %v", exported.ConfirmedAt, exported.ExportedAt)
	}
	at := exported.ExportedAt.Add(5 * time.Minute)
	if err := s.Confirm(context.Background(), sink.Confirmation{Cluster: "east", Inventory: "workloads", Checksum: e.prev.Checksum, At: at}); err != nil {
		t.Fatal(err)
	}
	st.onlyManifestChanged(t, before, st.Versions(), true)
	if m := manifestOf(t, st); !m.ConfirmedAt.Equal(at.UTC()) || !m.ExportedAt.Equal(exported.ExportedAt) {
		t.Fatalf("after the confirmation: confirmedAt %v exportedAt %v", m.ConfirmedAt, m.ExportedAt)
	}
	confirmed := st.Versions()
	if err := s.Confirm(context.Background(), sink.Confirmation{Cluster: "east", Inventory: "workloads", Checksum: "sha256:other", At: at}); !errors.Is(err, sink.ErrNotHeld) {
		t.Fatalf("confirming another checksum: %v, want ErrNotHeld", err)
	}
	if err := s.Confirm(context.Background(), sink.Confirmation{Cluster: "west", Inventory: "workloads", Checksum: e.prev.Checksum, At: at}); !errors.Is(err, sink.ErrNotHeld) {
		t.Fatalf("confirming without a manifest: %v, want ErrNotHeld", err)
	}
	st.onlyManifestChanged(t, confirmed, st.Versions(), false)
}

func manifestNamesItsWriter(t *testing.T, st ObjectStore) {
	s := st.Open("east", kollectv1.Serialization{Format: kollectv1.FormatYAML}, kollectv1.LayoutByNamespace)
	v1 := export.Writer{Version: "v0.1.0", Instance: "kollect-system@4f9c"}
	e := &objectExporter{sink: s, writer: v1}
	rows := []export.Row{workload("shop", "web", 2), workload("shop", "api", 3), workload("ops", "probe", 1)}
	e.export(t, rows...)
	if m := manifestOf(t, st); m.Writer != v1 {
		t.Fatalf("after an export the manifest names %+v, want %+v", m.Writer, v1)
	}
	before := st.Versions()
	if len(before) != 3 { // two namespaces' documents and the manifest
		t.Fatalf("stored %v", before)
	}
	for k := range before {
		if k != st.manifestName() && bytes.Contains(st.Read(k), []byte(v1.Instance)) {
			t.Errorf("%s names the writer", k)
		}
	}
	v2 := export.Writer{Version: "v0.2.0", Instance: v1.Instance}
	at := time.Now().UTC().Truncate(time.Second)
	if err := s.Confirm(context.Background(), sink.Confirmation{Cluster: "east", Inventory: "workloads", Checksum: e.prev.Checksum, At: at, Writer: v2}); err != nil {
		t.Fatal(err)
	}
	if m := manifestOf(t, st); m.Writer != v2 || !m.ConfirmedAt.Equal(at) {
		t.Fatalf("after the upgraded agent's confirmation the manifest names %+v (confirmedAt %v), want %+v", m.Writer, m.ConfirmedAt, v2)
	}
	confirmed := st.Versions()
	st.onlyManifestChanged(t, before, confirmed, true)
	restarted := &objectExporter{sink: s, writer: v2, resync: true}
	restarted.export(t, rows...)
	st.onlyManifestChanged(t, confirmed, st.Versions(), false)
}

func coverageOnlyRewritesTheManifest(t *testing.T, st ObjectStore) {
	ctx := context.Background()
	s := st.Open("east", kollectv1.Serialization{Format: kollectv1.FormatCSV}, kollectv1.LayoutByNamespace)
	forbidden := export.Coverage{Target: "apps/crons", State: kollectv1.CoverageForbidden,
		Reason: `cronjobs.batch is forbidden: User "system:serviceaccount:kollect:agent" cannot list resource "cronjobs"`}
	v1 := export.Writer{Version: "v0.3.0", Instance: "kollect@1"}
	e := &objectExporter{sink: s, writer: v1, coverage: []export.Coverage{Complete("apps/crons", 0), Complete("apps/deploys", 3)}}
	rows := []export.Row{workload("shop", "web", 2), workload("shop", "api", 3), workload("ops", "probe", 1)}
	e.export(t, rows...)
	first := manifestOf(t, st)
	if !slices.Equal(first.Coverage, e.coverage) {
		t.Fatalf("manifest coverage %+v, want %+v", first.Coverage, e.coverage)
	}
	before := st.Versions()
	if len(before) != 3 { // two namespaces' documents and the manifest
		t.Fatalf("stored %v", before)
	}

	// A target turned forbidden, its rows kept: same checksum, empty diff.
	e.coverage = []export.Coverage{forbidden, Complete("apps/deploys", 3)}
	e.writer = export.Writer{Version: "v0.3.1", Instance: v1.Instance}
	if got := e.export(t, rows...); got.Written != 0 || got.Deleted != 0 || !got.ManifestWritten {
		t.Fatalf("coverage-only export: %+v, want the manifest alone", got)
	}
	after := st.Versions()
	st.onlyManifestChanged(t, before, after, true)
	m := manifestOf(t, st)
	if !slices.Equal(m.Coverage, e.coverage) || m.Checksum != first.Checksum || !reflect.DeepEqual(m.Files, first.Files) {
		t.Fatalf("after the coverage-only export: coverage %+v checksum %s files %+v", m.Coverage, m.Checksum, m.Files)
	}
	if !m.ExportedAt.Equal(first.ExportedAt) || !m.ConfirmedAt.Equal(first.ConfirmedAt) || m.Writer != e.writer {
		t.Errorf("exportedAt %v -> %v, confirmedAt %v -> %v (no document changed, a forbidden target is not confirmed), writer %+v",
			first.ExportedAt, m.ExportedAt, first.ConfirmedAt, m.ConfirmedAt, m.Writer)
	}
	if got := e.export(t, rows...); got.ManifestWritten || got.Written != 0 {
		t.Fatalf("unchanged export: %+v", got)
	}
	st.onlyManifestChanged(t, after, st.Versions(), false)

	// A periodic resync that finds the documents current but the coverage changed.
	e.coverage = []export.Coverage{Complete("apps/crons", 0), Complete("apps/deploys", 3)}
	b, _ := e.batch(rows...)
	b.Resync = true
	if err := s.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	resynced := st.Versions()
	st.onlyManifestChanged(t, after, resynced, true)
	m = manifestOf(t, st)
	if !slices.Equal(m.Coverage, e.coverage) || !m.ConfirmedAt.Equal(b.Envelope.ExportedAt.UTC()) || !m.ExportedAt.Equal(first.ExportedAt) {
		t.Fatalf("after the resync: coverage %+v, confirmedAt %v (want %v: every target complete), exportedAt %v",
			m.Coverage, m.ConfirmedAt, b.Envelope.ExportedAt.UTC(), m.ExportedAt)
	}

	// A confirmation keeps the coverage.
	at := time.Now().Add(time.Minute).UTC().Truncate(time.Second)
	if err := s.Confirm(ctx, sink.Confirmation{Cluster: "east", Inventory: "workloads", Checksum: e.prev.Checksum, At: at, Writer: e.writer}); err != nil {
		t.Fatal(err)
	}
	st.onlyManifestChanged(t, resynced, st.Versions(), true)
	if m := manifestOf(t, st); !slices.Equal(m.Coverage, e.coverage) || !m.ConfirmedAt.Equal(at) {
		t.Fatalf("after a confirmation: coverage %+v, confirmedAt %v", m.Coverage, m.ConfirmedAt)
	}
}
