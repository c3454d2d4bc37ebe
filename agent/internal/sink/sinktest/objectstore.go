package sinktest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
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
	// Open builds a sink of cluster onto the store, under the prefix "inv", with the given
	// serialization and layout.
	Open func(cluster string, ser kollectv1.Serialization, mode kollectv1.LayoutMode) ObjectSink
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
const manifestName = "inv/east/workloads.manifest.json"

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
	m, err := snapshot.ParseManifest(st.Read(manifestName))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range m.Files {
		sum := sha256.Sum256(st.Read("inv/" + f.Path))
		if hex.EncodeToString(sum[:]) != f.SHA256 {
			t.Errorf("%s: stored hash differs from the manifest", f.Path)
		}
	}
	return m
}

// onlyManifestChanged fails unless, between two listings, exactly the manifest changed
// (wantManifest) or nothing did, and no object came or went.
func onlyManifestChanged(t *testing.T, before, after map[string]string, wantManifest bool) {
	t.Helper()
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
	onlyManifestChanged(t, before, st.Versions(), true)
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
	onlyManifestChanged(t, marked, st.Versions(), true) // the mark's time, nothing else
	err = first.sink.Confirm(ctx, sink.Confirmation{Cluster: "east", Inventory: "workloads", Checksum: m.Checksum,
		At: time.Now(), Writer: w1, ConflictWindow: time.Minute})
	if !errors.Is(err, sink.ErrContended) {
		t.Fatalf("the holder's confirmation: %v, want ErrContended", err)
	}
	if m := manifestOf(t, st); m.Writer != w1 || m.Checksum != first.prev.Checksum {
		t.Fatalf("after the holder's confirmation the manifest names %v with checksum %s", m.Writer, m.Checksum)
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
	onlyManifestChanged(t, before, st.Versions(), true)
	if m := manifestOf(t, st); !m.ConfirmedAt.Equal(at.UTC()) || !m.ExportedAt.Equal(exported.ExportedAt) {
		t.Fatalf("after the confirmation: confirmedAt %v exportedAt %v", m.ConfirmedAt, m.ExportedAt)
	}
	confirmed := st.Versions()
	if err := s.Confirm(context.Background(), sink.Confirmation{Cluster: "east", Inventory: "workloads", Checksum: "sha256:other", At: at}); !errors.Is(err, sink.ErrNotHeld) {
		t.Fatalf("confirming another checksum: %v, want ErrNotHeld", err)
	}
	onlyManifestChanged(t, confirmed, st.Versions(), false)
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
		if k != manifestName && bytes.Contains(st.Read(k), []byte(v1.Instance)) {
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
	onlyManifestChanged(t, before, confirmed, true)
	restarted := &objectExporter{sink: s, writer: v2, resync: true}
	restarted.export(t, rows...)
	onlyManifestChanged(t, confirmed, st.Versions(), false)
}

func coverageOnlyRewritesTheManifest(t *testing.T, st ObjectStore) {
	s := st.Open("east", kollectv1.Serialization{Format: kollectv1.FormatCSV}, kollectv1.LayoutByNamespace)
	notServed := export.Coverage{Target: "apps/crons", State: kollectv1.CoverageKindNotServed,
		Reason: "the cluster does not serve batch/v1beta1 CronJob"}
	e := &objectExporter{sink: s, coverage: []export.Coverage{Complete("apps/crons", 0), Complete("apps/deploys", 3)}}
	rows := []export.Row{workload("shop", "web", 2), workload("shop", "api", 3), workload("ops", "probe", 1)}
	e.export(t, rows...)
	first := manifestOf(t, st)
	if !slices.Equal(first.Coverage, e.coverage) {
		t.Fatalf("manifest coverage %+v, want %+v", first.Coverage, e.coverage)
	}
	before := st.Versions()

	e.coverage = []export.Coverage{notServed, Complete("apps/deploys", 3)}
	if got := e.export(t, rows...); got.Written != 0 || got.Deleted != 0 || !got.ManifestWritten {
		t.Fatalf("coverage-only export: %+v, want the manifest alone", got)
	}
	after := st.Versions()
	onlyManifestChanged(t, before, after, true)
	m := manifestOf(t, st)
	if !slices.Equal(m.Coverage, e.coverage) || m.Checksum != first.Checksum || !m.ExportedAt.Equal(first.ExportedAt) {
		t.Fatalf("after the coverage-only export: coverage %+v checksum %s exportedAt %v", m.Coverage, m.Checksum, m.ExportedAt)
	}
	if got := e.export(t, rows...); got.ManifestWritten || got.Written != 0 {
		t.Fatalf("unchanged export: %+v", got)
	}
	onlyManifestChanged(t, after, st.Versions(), false)
}
