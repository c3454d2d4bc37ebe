package bigquery

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	bq "cloud.google.com/go/bigquery"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

// stateOf reads the state row of east/apps: checksum, exported_at, confirmed_at.
func stateOf(t *testing.T, ds string) (string, time.Time, bq.Value) {
	t.Helper()
	rows := query(t, "SELECT checksum, exported_at, confirmed_at FROM `"+server.Project+"."+ds+".rows_state` WHERE cluster = 'east' AND inventory = 'apps'")
	if len(rows) != 1 {
		t.Fatalf("%d state rows, want 1", len(rows))
	}
	return rows[0][0].(string), rows[0][1].(time.Time), rows[0][2]
}

// rowCount is the rows table's row count, as the emulator counts it.
func rowCount(t *testing.T, ds string) int64 {
	t.Helper()
	return query(t, "SELECT COUNT(*) FROM `"+server.Project+"."+ds+".rows`")[0][0].(int64)
}

// TestConfirmMovesOnlyConfirmedAt, against the BigQuery emulator (a stand-in): an export sets
// confirmed_at to exported_at; a confirmation is one UPDATE of the state row's confirmed_at —
// the rows table keeps its row count and every row's updated_at, and exported_at stays — and a
// checksum the state row does not hold, or no state row, is ErrNotHeld and changes nothing.
func TestConfirmMovesOnlyConfirmedAt(t *testing.T) {
	ctx := context.Background()
	ds := newDataset(t)
	s, rec := newSink(t, ds, "east")
	a := &agent{sink: s, cluster: "east", inventory: "apps"}
	if err := a.export(ctx, mkRows("east", 10, 1)); err != nil {
		t.Fatal(err)
	}
	sum, exported, confirmed := stateOf(t, ds)
	if sum != a.lastChecksum || confirmed == nil || !confirmed.(time.Time).Equal(exported) {
		t.Fatalf("after an export: checksum %s, exported_at %v, confirmed_at %v", sum, exported, confirmed)
	}
	rowsBefore, countBefore := rowsOf(t, ds, ""), rowCount(t, ds)
	rec.Calls()

	at := exported.Add(5 * time.Minute).UTC()
	if err := s.Confirm(ctx, sink.Confirmation{Cluster: "east", Inventory: "apps", Checksum: a.lastChecksum, At: at}); err != nil {
		t.Fatal(err)
	}
	m := mutations(rec.Calls())
	if len(m) != 1 {
		t.Fatalf("a confirmation made %v, want one query job", m)
	}
	for k, n := range m {
		if !strings.HasSuffix(k, "/jobs") || n != 1 {
			t.Fatalf("a confirmation made %v, want one query job", m)
		}
	}
	sum2, exported2, confirmed2 := stateOf(t, ds)
	if sum2 != sum || !exported2.Equal(exported) || confirmed2 == nil || !confirmed2.(time.Time).Equal(at) {
		t.Fatalf("after the confirmation: checksum %s, exported_at %v (was %v), confirmed_at %v (want %v)", sum2, exported2, exported, confirmed2, at)
	}
	assertRowsUnchanged(t, ds, rowsBefore, countBefore)

	for _, c := range []sink.Confirmation{
		{Cluster: "east", Inventory: "apps", Checksum: "sha256:another", At: at.Add(time.Minute)},
		{Cluster: "east", Inventory: "other", Checksum: a.lastChecksum, At: at.Add(time.Minute)},
	} {
		if err := s.Confirm(ctx, c); !errors.Is(err, sink.ErrNotHeld) {
			t.Fatalf("confirming %s/%s at %s: %v, want ErrNotHeld", c.Cluster, c.Inventory, c.Checksum, err)
		}
	}
	if _, _, c := stateOf(t, ds); !c.(time.Time).Equal(at) {
		t.Fatalf("a refused confirmation moved confirmed_at to %v", c)
	}
	assertRowsUnchanged(t, ds, rowsBefore, countBefore)
}

func assertRowsUnchanged(t *testing.T, ds string, before []storedRow, count int64) {
	t.Helper()
	if n := rowCount(t, ds); n != count {
		t.Fatalf("rows table holds %d rows, %d before", n, count)
	}
	after := rowsOf(t, ds, "")
	for i := range before {
		if before[i].UID != after[i].UID || !before[i].UpdatedAt.Equal(after[i].UpdatedAt) {
			t.Fatalf("row %s changed: %+v → %+v", before[i].UID, before[i], after[i])
		}
	}
}

// TestStateTableGainsConfirmedAt: a state table made before confirmed_at existed gets the
// column, and the later agent_version and agent_instance, when the sink provisions: one
// tables.patch of the state table, which BigQuery applies to the table in place (NULLABLE
// columns may be added so), and no other write but the creation of the (new) coverage table.
//
// The emulator answers the patch with the new schema but does not keep it (a later
// tables.get, and queries, still lack the column), and it refuses ALTER TABLE … ADD COLUMN
// ("Statement not supported: AlterTableStatement"): so this test stops at the patch, and
// confirmations are tested on tables the sink created (TestConfirmMovesOnlyConfirmedAt).
func TestStateTableGainsConfirmedAt(t *testing.T) {
	ctx := context.Background()
	ds := newDataset(t)
	c := admin(t)
	if err := c.Dataset(ds).Create(ctx, &bq.DatasetMetadata{Location: "EU"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Dataset(ds).Table("rows").Create(ctx, &bq.TableMetadata{Schema: rowsSchema}); err != nil {
		t.Fatal(err)
	}
	old := stateSchema[:len(stateSchema)-len(addedStateColumns)]
	if old[len(old)-1].Name != "exported_at" {
		t.Fatalf("the pre-confirmation schema ends with %s", old[len(old)-1].Name)
	}
	if err := c.Dataset(ds).Table("rows_state").Create(ctx, &bq.TableMetadata{Schema: old}); err != nil {
		t.Fatal(err)
	}
	s, rec := newSink(t, ds, "east")
	if err := s.ensureProvisioned(ctx); err != nil {
		t.Fatal(err)
	}
	// The coverage table is new too; the view is not created over the unpatched table the
	// emulator keeps (see schema.go).
	if m := mutations(rec.Calls()); len(m) != 2 || m["PATCH table"] != 1 || m["POST table"] != 1 {
		t.Fatalf("provisioning over an old state table made %v, want one tables.patch and the coverage table", m)
	}
	// A table with the column is left alone.
	s2, rec2 := newSink(t, ds, "east")
	if err := s2.provision(ctx); err != nil {
		t.Fatal(err)
	}
	md, err := c.Dataset(ds).Table("rows_state").Metadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	patched := false
	for _, f := range md.Schema {
		patched = patched || f.Name == confirmedAt.Name
	}
	if m := mutations(rec2.Calls()); patched && len(m) != 0 {
		t.Fatalf("provisioning over a migrated state table wrote %v", m)
	} else if !patched {
		t.Logf("the emulator kept no schema patch (see the comment): %d columns", len(md.Schema))
	}
}

// TestStateTableGainsWriterColumns: a state table with confirmed_at but made before
// agent_version and agent_instance gets those two in one tables.patch, and no other write
// (what the emulator keeps of it: see TestStateTableGainsConfirmedAt).
func TestStateTableGainsWriterColumns(t *testing.T) {
	ctx := context.Background()
	ds := newDataset(t)
	c := admin(t)
	if err := c.Dataset(ds).Create(ctx, &bq.DatasetMetadata{Location: "EU"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Dataset(ds).Table("rows").Create(ctx, &bq.TableMetadata{Schema: rowsSchema}); err != nil {
		t.Fatal(err)
	}
	old := append(append(bq.Schema(nil), stateSchema[:len(stateSchema)-len(addedStateColumns)]...), confirmedAt)
	if err := c.Dataset(ds).Table("rows_state").Create(ctx, &bq.TableMetadata{Schema: old}); err != nil {
		t.Fatal(err)
	}
	s, rec := newSink(t, ds, "east")
	if err := s.ensureProvisioned(ctx); err != nil {
		t.Fatal(err)
	}
	if m := mutations(rec.Calls()); len(m) != 2 || m["PATCH table"] != 1 || m["POST table"] != 1 {
		t.Fatalf("provisioning over a state table without the writer columns made %v, want one tables.patch and the coverage table", m)
	}
}

// writerOf reads the state row's agent_version and agent_instance (NULL reads as "").
func writerOf(t *testing.T, ds string) export.Writer {
	t.Helper()
	rows := query(t, "SELECT agent_version, agent_instance FROM `"+server.Project+"."+ds+".rows_state` WHERE cluster = 'east' AND inventory = 'apps'")
	if len(rows) != 1 {
		t.Fatalf("%d state rows, want 1", len(rows))
	}
	v, _ := rows[0][0].(string)
	i, _ := rows[0][1].(string)
	return export.Writer{Version: v, Instance: i}
}

// TestStateNamesItsWriter, against the BigQuery emulator (a stand-in): the state row's
// agent_version and agent_instance name the agent of the last export or confirmation; an
// upgraded agent's confirmation renames the writer and rewrites no row (the rows table keeps
// its row count and every row's updated_at), and an upgraded agent re-sending the same
// snapshot in full after losing its baseline writes no row either.
func TestStateNamesItsWriter(t *testing.T) {
	ctx := context.Background()
	ds := newDataset(t)
	s, _ := newSink(t, ds, "east")
	v1 := export.Writer{Version: "v0.1.0", Instance: "kollect-system@4f9c"}
	a := &agent{sink: s, cluster: "east", inventory: "apps", writer: v1}
	rows := mkRows("east", 10, 1)
	if err := a.export(ctx, rows); err != nil {
		t.Fatal(err)
	}
	if got := writerOf(t, ds); got != v1 {
		t.Fatalf("after an export the state names %+v, want %+v", got, v1)
	}
	rowsBefore, countBefore := rowsOf(t, ds, ""), rowCount(t, ds)

	v2 := export.Writer{Version: "v0.2.0", Instance: v1.Instance}
	upgraded, _ := newSink(t, ds, "east")
	_, exported, _ := stateOf(t, ds)
	at := exported.Add(5 * time.Minute).UTC()
	if err := upgraded.Confirm(ctx, sink.Confirmation{Cluster: "east", Inventory: "apps", Checksum: a.lastChecksum, At: at, Writer: v2}); err != nil {
		t.Fatal(err)
	}
	if got := writerOf(t, ds); got != v2 {
		t.Fatalf("after the upgraded agent's confirmation the state names %+v, want %+v", got, v2)
	}
	if _, _, confirmed := stateOf(t, ds); confirmed == nil || !confirmed.(time.Time).Equal(at) {
		t.Fatalf("after the upgraded agent's confirmation confirmed_at is %v, want %v", confirmed, at)
	}
	assertRowsUnchanged(t, ds, rowsBefore, countBefore)

	restarted := &agent{sink: upgraded, cluster: "east", inventory: "apps", writer: v2}
	if err := restarted.export(ctx, rows); err != nil {
		t.Fatal(err)
	}
	assertRowsUnchanged(t, ds, rowsBefore, countBefore)
}
