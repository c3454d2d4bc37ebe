package bigquery

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"kollect.dev/agent/internal/export"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

const (
	rowsTable  = "test.kollect.rows"
	stateTable = "test.kollect.rows_state"
)

func newFake(t *testing.T) *FakeBigQuery {
	f := NewFakeBigQuery()
	t.Cleanup(f.Close)
	return f
}

func spec(f *FakeBigQuery) *v1alpha1.BigQuerySinkConfig {
	return &v1alpha1.BigQuerySinkConfig{Project: "test", Dataset: "kollect", Location: "EU", Endpoint: f.URL}
}

func newSink(t *testing.T, f *FakeBigQuery, cluster string) *Sink {
	t.Helper()
	s, err := New(context.Background(), spec(f), export.Env{Cluster: cluster, Namespace: "kollect", Name: "bq", Log: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// agent mimics the exporter; see the postgres tests.
type agent struct {
	sink               *Sink
	cluster, inventory string
	prev, pending      *export.Snapshot
	lastChecksum       string
}

func (a *agent) batch(rows []export.Row) *export.Batch {
	next := export.NewSnapshot(append([]export.Row(nil), rows...))
	a.pending = next
	return &export.Batch{
		Envelope: export.Envelope{SchemaVersion: export.SchemaVersion, Cluster: a.cluster, Inventory: a.inventory,
			ExportedAt: time.Now(), ItemCount: next.Len(), Checksum: next.Checksum, Rows: next.Rows},
		Diff:             export.Compute(a.prev, next),
		PreviousChecksum: a.lastChecksum,
	}
}

func (a *agent) export(ctx context.Context, rows []export.Row) error {
	if err := a.sink.Export(ctx, a.batch(rows)); err != nil {
		return err
	}
	a.prev, a.lastChecksum = a.pending, a.pending.Checksum
	return nil
}

func mkRow(cluster string, i int, attrs map[string]any) export.Row {
	raw, err := export.EncodeAttributes(attrs)
	if err != nil {
		panic(err)
	}
	return export.Row{Cluster: cluster, Inventory: "apps", Target: "deployments", Group: "apps", Version: "v1",
		Kind: "Deployment", Namespace: "ns", Name: fmt.Sprintf("app-%03d", i), UID: fmt.Sprintf("%s-%03d", cluster, i), Attributes: raw}
}

func mkRows(cluster string, n, version int) []export.Row {
	rows := make([]export.Row, n)
	for i := range rows {
		rows[i] = mkRow(cluster, i, map[string]any{"image": fmt.Sprintf("app:%d", version), "replicas": i})
	}
	return rows
}

// uids lists the uids of a cluster's rows in the fake.
func uids(f *FakeBigQuery, cluster string) []string {
	var out []string
	for _, r := range f.Rows(rowsTable) {
		if r["cluster"] == cluster {
			out = append(out, r["uid"].(string))
		}
	}
	slices.Sort(out)
	return out
}

func mutations(calls map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range calls {
		if strings.HasPrefix(k, "POST ") && k != "POST query" || strings.HasPrefix(k, "DELETE") || k == "query merge" {
			out[k] = v
		}
	}
	return out
}

func TestProvisionsDatasetAndTables(t *testing.T) {
	f := newFake(t)
	s := newSink(t, f, "east")
	if err := (&agent{sink: s, cluster: "east", inventory: "apps"}).export(context.Background(), mkRows("east", 2, 1)); err != nil {
		t.Fatal(err)
	}
	if ds := f.datasets["test.kollect"]; ds == nil || ds.Location != "EU" {
		t.Fatalf("dataset %+v", ds)
	}
	meta := f.tables[rowsTable].meta
	var cols []string
	for _, fl := range meta.Schema.Fields {
		cols = append(cols, fl.Name+":"+fl.Type)
	}
	want := []string{"cluster:STRING", "inventory:STRING", "target:STRING", "api_group:STRING", "version:STRING", "kind:STRING",
		"namespace:STRING", "name:STRING", "uid:STRING", "attributes:JSON", "first_seen:TIMESTAMP", "updated_at:TIMESTAMP"}
	if !slices.Equal(cols, want) {
		t.Fatalf("rows schema %v", cols)
	}
	if meta.Clustering == nil || !slices.Equal(meta.Clustering.Fields, []string{"cluster", "inventory", "kind"}) {
		t.Fatalf("clustering %+v", meta.Clustering)
	}
	if f.tables[stateTable] == nil {
		t.Fatal("no state table")
	}
	if tables := f.Tables(); len(tables) != 2 {
		t.Fatalf("staging table left behind: %v", tables)
	}
}

func TestTwoClustersShareOneTable(t *testing.T) {
	ctx := context.Background()
	f := newFake(t)
	a := &agent{sink: newSink(t, f, "east"), cluster: "east", inventory: "apps"}
	b := &agent{sink: newSink(t, f, "west"), cluster: "west", inventory: "apps"}
	rowsA := mkRows("east", 5, 1)
	if err := a.export(ctx, rowsA); err != nil {
		t.Fatal(err)
	}
	if err := b.export(ctx, mkRows("west", 3, 1)); err != nil {
		t.Fatal(err)
	}
	if len(uids(f, "east")) != 5 || len(uids(f, "west")) != 3 {
		t.Fatalf("east %v west %v", uids(f, "east"), uids(f, "west"))
	}
	if err := a.export(ctx, append(append([]export.Row(nil), rowsA[:1]...), rowsA[2:]...)); err != nil {
		t.Fatal(err)
	}
	if got := uids(f, "east"); slices.Contains(got, "east-001") || len(got) != 4 {
		t.Fatalf("after deleting east-001: %v", got)
	}
	restarted := &agent{sink: a.sink, cluster: "east", inventory: "apps"}
	if err := restarted.export(ctx, mkRows("east", 2, 2)); err != nil {
		t.Fatal(err)
	}
	if got := uids(f, "east"); len(got) != 2 {
		t.Fatalf("east after reconcile: %v", got)
	}
	if got := uids(f, "west"); len(got) != 3 {
		t.Fatalf("east's reconcile touched west: %v", got)
	}
	if err := a.sink.Export(ctx, b.batch(mkRows("west", 1, 1))); export.ClassOf(err) != export.Terminal || err == nil {
		t.Fatalf("east's sink accepted west's rows: %v", err)
	}
}

func TestUnchangedDataWritesNothing(t *testing.T) {
	ctx := context.Background()
	f := newFake(t)
	a := &agent{sink: newSink(t, f, "east"), cluster: "east", inventory: "apps"}
	rows := mkRows("east", 20, 1)
	if err := a.export(ctx, rows); err != nil {
		t.Fatal(err)
	}
	if m := mutations(f.Calls()); m["query merge"] != 1 || m["POST insertAll"] == 0 {
		t.Fatalf("first export: %v", m)
	}
	if err := a.export(ctx, rows); err != nil {
		t.Fatal(err)
	}
	if m := mutations(f.Calls()); len(m) != 0 {
		t.Fatalf("an unchanged export wrote: %v", m)
	}
	for _, last := range []string{a.lastChecksum, ""} {
		r := &agent{sink: newSink(t, f, "east"), cluster: "east", inventory: "apps", lastChecksum: last}
		if err := r.export(ctx, rows); err != nil {
			t.Fatal(err)
		}
		if m := mutations(f.Calls()); len(m) != 0 {
			t.Fatalf("an unchanged export after a restart wrote: %v", m)
		}
	}
	before := f.Rows(rowsTable)
	b := a.batch(rows)
	b.Resync = true
	if err := a.sink.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	after := f.Rows(rowsTable)
	for i := range before {
		if before[i]["updated_at"] != after[i]["updated_at"] {
			t.Fatal("a resync of equal data rewrote a row")
		}
	}
}

func TestDiffAppliesOnlyChangesAndMismatchReconciles(t *testing.T) {
	ctx := context.Background()
	f := newFake(t)
	a := &agent{sink: newSink(t, f, "east"), cluster: "east", inventory: "apps"}
	rows := mkRows("east", 10, 1)
	if err := a.export(ctx, rows); err != nil {
		t.Fatal(err)
	}
	f.Calls()
	next := append([]export.Row(nil), rows...)
	next[3] = mkRow("east", 3, map[string]any{"image": "app:9"})
	if err := a.export(ctx, next); err != nil {
		t.Fatal(err)
	}
	// The diff stages one row, not ten.
	if got := f.Calls()["POST insertAll"]; got != 1 {
		t.Fatalf("%d insertAll calls", got)
	}
	// Drift: a stray row and a state checksum nobody computed.
	f.mu.Lock()
	f.tables[rowsTable].rows = append(f.tables[rowsTable].rows, map[string]any{"cluster": "east", "inventory": "apps",
		"target": "deployments", "uid": "stray", "attributes": "{}"})
	f.tables[stateTable].rows[0]["checksum"] = "sha256:drifted"
	f.mu.Unlock()
	next[4] = mkRow("east", 4, map[string]any{"image": "app:8"})
	if err := a.export(ctx, next); err != nil {
		t.Fatal(err)
	}
	got := uids(f, "east")
	if len(got) != 10 || slices.Contains(got, "stray") {
		t.Fatalf("after the reconcile: %v", got)
	}
	if st := f.Rows(stateTable)[0]; st["checksum"] != a.lastChecksum || st["item_count"] != "10" {
		t.Fatalf("state %v", st)
	}
}

func TestInterruptedExportConverges(t *testing.T) {
	for _, kind := range []string{"insertAll", "merge"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			f := newFake(t)
			a := &agent{sink: newSink(t, f, "east"), cluster: "east", inventory: "apps"}
			if err := a.export(ctx, mkRows("east", 5, 1)); err != nil {
				t.Fatal(err)
			}
			before := f.Rows(rowsTable)
			// The server keeps failing until the export's deadline passes.
			f.Fail(kind, 1000, 503, "backendError")
			cctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
			defer cancel()
			err := a.export(cctx, mkRows("east", 8, 2))
			if err == nil || export.ClassOf(err) != export.Transient {
				t.Fatalf("interrupted export: %v (%s)", err, export.ClassOf(err))
			}
			if after := f.Rows(rowsTable); len(after) != len(before) || after[0]["attributes"] != before[0]["attributes"] {
				t.Fatal("the interrupted export changed rows")
			}
			f.Fail(kind, 0, 0, "")
			if err := a.export(ctx, mkRows("east", 8, 2)); err != nil {
				t.Fatal(err)
			}
			if got := uids(f, "east"); len(got) != 8 {
				t.Fatalf("after the retry: %v", got)
			}
			for _, r := range f.Rows(rowsTable) {
				if !strings.Contains(r["attributes"].(string), "app:2") {
					t.Fatalf("stale row %v", r)
				}
			}
			if tables := f.Tables(); len(tables) != 2 {
				t.Fatalf("staging tables left behind: %v", tables)
			}
		})
	}
}

func TestLargeUnicodeNestedAttributesRoundTrip(t *testing.T) {
	f := newFake(t)
	s := newSink(t, f, "east")
	row := mkRow("east", 1, map[string]any{"name": "名前 — ☸ é", "big": strings.Repeat("ü✓ab", 1<<20/7),
		"nested": map[string]any{"a": []any{1, "two", map[string]any{"three": true, "nil": nil}}}, "quote": `"'\` + "\n"})
	row.Name = "ünïcödé"
	if err := (&agent{sink: s, cluster: "east", inventory: "apps"}).export(context.Background(), []export.Row{row}); err != nil {
		t.Fatal(err)
	}
	got := f.Rows(rowsTable)
	if len(got) != 1 || got[0]["attributes"] != string(row.Attributes) || got[0]["name"] != "ünïcödé" {
		t.Fatalf("row did not round-trip: %.200v", got)
	}
}
