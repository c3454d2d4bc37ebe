package bigquery

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	bq "cloud.google.com/go/bigquery"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

func TestProvisionsDatasetAndTables(t *testing.T) {
	ctx := context.Background()
	ds := newDataset(t)
	s, _ := newSink(t, ds, "east")
	if err := (&agent{sink: s, cluster: "east", inventory: "apps"}).export(ctx, mkRows("east", 2, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := admin(t).Dataset(ds).Metadata(ctx); err != nil {
		t.Fatalf("dataset: %v", err)
	}
	meta, err := admin(t).Dataset(ds).Table("rows").Metadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var cols []string
	for _, f := range meta.Schema {
		cols = append(cols, fmt.Sprintf("%s:%s:%t", f.Name, f.Type, f.Required))
	}
	want := []string{"cluster:STRING:true", "inventory:STRING:true", "target:STRING:true", "api_group:STRING:true",
		"version:STRING:true", "kind:STRING:true", "namespace:STRING:true", "name:STRING:true", "uid:STRING:true",
		"attributes:JSON:true", "first_seen:TIMESTAMP:true", "updated_at:TIMESTAMP:true",
		"profile:STRING:false", "profile_generation:INTEGER:false"}
	if !slices.Equal(cols, want) {
		t.Fatalf("rows schema %v", cols)
	}
	if got := tables(t, ds); !slices.Equal(got, []string{"rows", "rows_coverage", "rows_covered", "rows_state"}) {
		t.Fatalf("tables %v (a staging table left behind?)", got)
	}
	if got := uids(t, ds, "east"); !slices.Equal(got, []string{"east-000", "east-001"}) {
		t.Fatalf("rows %v", got)
	}
	// A second sink finds everything provisioned and creates nothing.
	s2, rec := newSink(t, ds, "east")
	if err := (&agent{sink: s2, cluster: "east", inventory: "apps"}).export(ctx, mkRows("east", 2, 1)); err != nil {
		t.Fatal(err)
	}
	if m := mutations(rec.Calls()); len(m) != 0 {
		t.Fatalf("an unchanged export by a new sink wrote: %v", m)
	}
}

func TestTwoClustersShareOneTable(t *testing.T) {
	ctx := context.Background()
	ds := newDataset(t)
	sa, _ := newSink(t, ds, "east")
	sb, _ := newSink(t, ds, "west")
	a := &agent{sink: sa, cluster: "east", inventory: "apps"}
	b := &agent{sink: sb, cluster: "west", inventory: "apps"}
	rowsA := mkRows("east", 5, 1)
	if err := a.export(ctx, rowsA); err != nil {
		t.Fatal(err)
	}
	if err := b.export(ctx, mkRows("west", 3, 1)); err != nil {
		t.Fatal(err)
	}
	if e, w := uids(t, ds, "east"), uids(t, ds, "west"); len(e) != 5 || len(w) != 3 {
		t.Fatalf("east %v west %v", e, w)
	}
	// One deleted object removes exactly its row.
	if err := a.export(ctx, append(append([]export.Row(nil), rowsA[:1]...), rowsA[2:]...)); err != nil {
		t.Fatal(err)
	}
	if got := uids(t, ds, "east"); !slices.Equal(got, []string{"east-000", "east-002", "east-003", "east-004"}) {
		t.Fatalf("after deleting east-001: %v", got)
	}
	// A restarted agent has no previous snapshot: a full reconcile of east only.
	restarted := &agent{sink: a.sink, cluster: "east", inventory: "apps"}
	if err := restarted.export(ctx, mkRows("east", 2, 2)); err != nil {
		t.Fatal(err)
	}
	if got := uids(t, ds, "east"); !slices.Equal(got, []string{"east-000", "east-001"}) {
		t.Fatalf("east after reconcile: %v", got)
	}
	if got := uids(t, ds, "west"); len(got) != 3 {
		t.Fatalf("east's reconcile touched west: %v", got)
	}
	for _, r := range rowsOf(t, ds, "west") {
		if !strings.Contains(r.Attributes, `"app:1"`) {
			t.Fatalf("west row changed: %+v", r)
		}
	}
	if err := a.sink.Export(ctx, b.batch(mkRows("west", 1, 1))); sink.ClassOf(err) != sink.Terminal || err == nil {
		t.Fatalf("east's sink accepted west's rows: %v", err)
	}
}

func TestUnchangedDataWritesNothing(t *testing.T) {
	ctx := context.Background()
	ds := newDataset(t)
	s, rec := newSink(t, ds, "east")
	a := &agent{sink: s, cluster: "east", inventory: "apps"}
	rows := mkRows("east", 20, 1)
	if err := a.export(ctx, rows); err != nil {
		t.Fatal(err)
	}
	if m := mutations(rec.Calls()); m["query script"] != 1 || m["POST insertAll"] == 0 {
		t.Fatalf("first export: %v", m)
	}
	if err := a.export(ctx, rows); err != nil {
		t.Fatal(err)
	}
	if m := mutations(rec.Calls()); len(m) != 0 {
		t.Fatalf("an unchanged export wrote: %v", m)
	}
	// Restarts, with and without the last checksum: one state read, no write.
	for _, last := range []string{a.lastChecksum, ""} {
		s2, rec2 := newSink(t, ds, "east")
		r := &agent{sink: s2, cluster: "east", inventory: "apps", lastChecksum: last}
		if err := r.export(ctx, rows); err != nil {
			t.Fatal(err)
		}
		if m := mutations(rec2.Calls()); len(m) != 0 {
			t.Fatalf("an unchanged export after a restart wrote: %v", m)
		}
	}
	// A resync of equal data reads the rows back and writes nothing, not even a staging table.
	rec.Calls()
	before := rowsOf(t, ds, "east")
	b := a.batch(rows)
	b.Resync = true
	if err := a.sink.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	calls := rec.Calls()
	if m := mutations(calls); len(m) != 0 {
		t.Fatalf("a resync of equal data wrote: %v", m)
	}
	if calls["query rows"] != 1 {
		t.Fatalf("a resync of equal data did not read the rows back: %v", calls)
	}
	after := rowsOf(t, ds, "east")
	if len(after) != len(before) {
		t.Fatalf("%d rows after the resync, %d before", len(after), len(before))
	}
	for i := range before {
		if !before[i].UpdatedAt.Equal(after[i].UpdatedAt) {
			t.Fatalf("a resync of equal data rewrote %s", before[i].UID)
		}
	}
}

// TestResyncRepairsDriftTheStateDoesNotShow: rows edited, deleted and added behind the sink's
// back leave the state's checksum as it was, so only the resync's read of the rows sees them,
// and its reconcile restores exactly the snapshot.
func TestResyncRepairsDriftTheStateDoesNotShow(t *testing.T) {
	ctx := context.Background()
	ds := newDataset(t)
	s, rec := newSink(t, ds, "east")
	a := &agent{sink: s, cluster: "east", inventory: "apps"}
	rows := mkRows("east", 10, 1)
	if err := a.export(ctx, rows); err != nil {
		t.Fatal(err)
	}
	want := rowsOf(t, ds, "east")
	ref := "`" + server.Project + "." + ds + ".rows`"
	for name, drift := range map[string]string{
		"an edited attribute": "UPDATE " + ref + " SET attributes = JSON '{\"image\":\"edited\"}' WHERE uid = 'east-003'",
		"a deleted row":       "DELETE FROM " + ref + " WHERE uid = 'east-004'",
		"a stray row": "INSERT INTO " + ref + " (cluster, inventory, target, api_group, version, kind, namespace, name, uid, attributes, first_seen, updated_at) " +
			"VALUES ('east', 'apps', 'deployments', 'apps', 'v1', 'Deployment', 'ns', 'stray', 'stray', JSON '{}', CURRENT_TIMESTAMP(), CURRENT_TIMESTAMP())",
		"an edited name": "UPDATE " + ref + " SET name = 'renamed' WHERE uid = 'east-005'",
	} {
		query(t, drift)
		rec.Calls()
		b := a.batch(rows)
		b.Resync = true
		if err := a.sink.Export(ctx, b); err != nil {
			t.Fatal(err)
		}
		if m := mutations(rec.Calls()); m["query script"] != 1 {
			t.Fatalf("%s: the resync did not reconcile: %v", name, m)
		}
		got := rowsOf(t, ds, "east")
		if len(got) != len(want) {
			t.Fatalf("%s: %d rows after the resync, want %d", name, len(got), len(want))
		}
		for i := range want {
			if got[i].UID != want[i].UID || got[i].Name != want[i].Name || !sameJSON(got[i].Attributes, want[i].Attributes) {
				t.Fatalf("%s: row %d is %+v after the resync, want %+v", name, i, got[i], want[i])
			}
		}
	}
}

func TestDiffAppliesOnlyChangesAndMismatchReconciles(t *testing.T) {
	ctx := context.Background()
	ds := newDataset(t)
	s, rec := newSink(t, ds, "east")
	a := &agent{sink: s, cluster: "east", inventory: "apps"}
	rows := mkRows("east", 10, 1)
	if err := a.export(ctx, rows); err != nil {
		t.Fatal(err)
	}
	first := rowsOf(t, ds, "east")
	rec.Calls()
	next := append([]export.Row(nil), rows...)
	next[3] = mkRow("east", 3, map[string]any{"image": "app:9"})
	next = append(next, mkRow("east", 10, map[string]any{"image": "app:10"}))
	if err := a.export(ctx, next); err != nil {
		t.Fatal(err)
	}
	// The diff stages two rows, not eleven, in one insertAll.
	if got := rec.Calls()["POST insertAll"]; got != 1 {
		t.Fatalf("%d insertAll calls", got)
	}
	got := rowsOf(t, ds, "east")
	if len(got) != 11 {
		t.Fatalf("%d rows after the diff", len(got))
	}
	for i, r := range got[:10] {
		switch {
		case i == 3 && (!sameJSON(r.Attributes, `{"image":"app:9"}`) || !r.FirstSeen.Equal(first[3].FirstSeen) || !r.UpdatedAt.After(first[3].UpdatedAt)):
			t.Fatalf("changed row %+v (was %+v)", r, first[3])
		case i != 3 && (r.Attributes != first[i].Attributes || !r.UpdatedAt.Equal(first[i].UpdatedAt)):
			t.Fatalf("unchanged row rewritten: %+v", r)
		}
	}
	if r := got[10]; r.UID != "east-010" || !r.FirstSeen.Equal(r.UpdatedAt) {
		t.Fatalf("new row %+v", r)
	}
	// Drift behind the sink's back: a stray row and a state checksum nobody computed.
	ref := "`" + server.Project + "." + ds
	query(t, "INSERT INTO "+ref+".rows` (cluster, inventory, target, api_group, version, kind, namespace, name, uid, attributes, first_seen, updated_at) "+
		"VALUES ('east', 'apps', 'deployments', 'apps', 'v1', 'Deployment', 'ns', 'stray', 'stray', JSON '{}', CURRENT_TIMESTAMP(), CURRENT_TIMESTAMP())")
	query(t, "UPDATE "+ref+".rows_state` SET checksum = 'sha256:drifted' WHERE cluster = 'east'")
	next[4] = mkRow("east", 4, map[string]any{"image": "app:8"})
	if err := a.export(ctx, next); err != nil {
		t.Fatal(err)
	}
	if got := uids(t, ds, "east"); len(got) != 11 || slices.Contains(got, "stray") {
		t.Fatalf("after the reconcile: %v", got)
	}
	st := query(t, "SELECT checksum, item_count FROM "+ref+".rows_state`")
	if len(st) != 1 || st[0][0] != a.lastChecksum || st[0][1] != int64(11) {
		t.Fatalf("state %v, want %s and 11", st, a.lastChecksum)
	}
}

func TestInterruptedExportConverges(t *testing.T) {
	for _, kind := range []string{"POST insertAll", "query script"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			ds := newDataset(t)
			s, rec := newSink(t, ds, "east")
			a := &agent{sink: s, cluster: "east", inventory: "apps"}
			if err := a.export(ctx, mkRows("east", 5, 1)); err != nil {
				t.Fatal(err)
			}
			before := rowsOf(t, ds, "east")
			// The request keeps failing until the export's deadline passes.
			rec.Fail(kind, 1000, 503, "backendError")
			cctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
			defer cancel()
			err := a.export(cctx, mkRows("east", 8, 2))
			if err == nil || sink.ClassOf(err) != sink.Transient {
				t.Fatalf("interrupted export: %v (%s)", err, sink.ClassOf(err))
			}
			if after := rowsOf(t, ds, "east"); !slices.Equal(after, before) {
				t.Fatalf("the interrupted export changed rows: %v", after)
			}
			rec.Fail(kind, 0, 0, "")
			if err := a.export(ctx, mkRows("east", 8, 2)); err != nil {
				t.Fatal(err)
			}
			got := rowsOf(t, ds, "east")
			if len(got) != 8 {
				t.Fatalf("after the retry: %v", got)
			}
			for _, r := range got {
				if !strings.Contains(r.Attributes, "app:2") {
					t.Fatalf("stale row %+v", r)
				}
			}
			if got := tables(t, ds); !slices.Equal(got, []string{"rows", "rows_coverage", "rows_covered", "rows_state"}) {
				t.Fatalf("staging tables left behind: %v", got)
			}
		})
	}
}

// TestFailedScriptLeavesNothing runs the transaction on a staging table whose second
// statement fails (a new row whose attributes are not JSON) after the first wrote the new
// version of a changed row: nothing of it may remain.
func TestFailedScriptLeavesNothing(t *testing.T) {
	ctx := context.Background()
	ds := newDataset(t)
	s, _ := newSink(t, ds, "east")
	a := &agent{sink: s, cluster: "east", inventory: "apps"}
	if err := a.export(ctx, mkRows("east", 3, 1)); err != nil {
		t.Fatal(err)
	}
	before := rowsOf(t, ds, "east")
	ref := "`" + server.Project + "." + ds
	query(t, "CREATE TABLE "+ref+".stage_manual` (op STRING, target STRING, api_group STRING, version STRING, kind STRING, namespace STRING, name STRING, uid STRING, attributes STRING)")
	query(t, "INSERT INTO "+ref+".stage_manual` (op, target, api_group, version, kind, namespace, name, uid, attributes) VALUES "+
		"('upsert', 'deployments', 'apps', 'v1', 'Deployment', 'ns', 'app-001', 'east-001', '{\"image\":\"app:9\"}'), "+
		"('upsert', 'deployments', 'apps', 'v1', 'Deployment', 'ns', 'app-new', 'east-new', '{not json')")
	now := time.Now().UTC().Truncate(time.Microsecond)
	q := admin(t).Query(s.script(ref+".stage_manual`", false, "", true))
	q.Parameters = []bq.QueryParameter{{Name: "cluster", Value: "east"}, {Name: "inventory", Value: "apps"},
		{Name: "checksum", Value: "sha256:never"}, {Name: "item_count", Value: int64(3)},
		{Name: "exported_at", Value: now}, {Name: "now", Value: now}}
	if _, err := q.Read(ctx); err == nil {
		t.Fatal("the script with invalid JSON succeeded")
	}
	if after := rowsOf(t, ds, "east"); !slices.Equal(after, before) {
		t.Fatalf("a failed script changed rows: %v", after)
	}
	if st := query(t, "SELECT checksum FROM "+ref+".rows_state`"); len(st) != 1 || st[0][0] != a.lastChecksum {
		t.Fatalf("a failed script changed the state: %v", st)
	}
}

func TestLargeUnicodeNestedAttributesRoundTrip(t *testing.T) {
	ds := newDataset(t)
	s, _ := newSink(t, ds, "east")
	row := mkRow("east", 1, map[string]any{"name": "名前 — ☸ é", "big": strings.Repeat("ü✓ab", 1<<20/7),
		"nested": map[string]any{"a": []any{1, "two", map[string]any{"three": true, "nil": nil}}}, "quote": `"'\` + "\n"})
	row.Name = "ünïcödé"
	if err := (&agent{sink: s, cluster: "east", inventory: "apps"}).export(context.Background(), []export.Row{row}); err != nil {
		t.Fatal(err)
	}
	got := rowsOf(t, ds, "east")
	if len(got) != 1 || !sameJSON(got[0].Attributes, string(row.Attributes)) || got[0].Name != "ünïcödé" {
		t.Fatalf("row did not round-trip: %.200v", got)
	}
}
