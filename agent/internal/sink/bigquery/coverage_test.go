package bigquery

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

// services builds n Service rows of target "services".
func services(cluster string, n int) []export.Row {
	out := make([]export.Row, n)
	for i := range out {
		out[i] = mkRow(cluster, 100+i, map[string]any{"port": 80 + i}).With(func(o *export.Origin) {
			o.Group, o.Kind, o.Target = "", "Service", "services"
		})
	}
	return out
}

var complete = sinktest.Complete

// storedEntry is one coverage row as the emulator holds it.
type storedEntry struct {
	export.Coverage
	UpdatedAt time.Time
}

func storedCoverage(tb testing.TB, dataset, cluster string) map[string]storedEntry {
	tb.Helper()
	out := map[string]storedEntry{}
	for _, v := range query(tb, "SELECT target, state, row_count, extraction_errors, reason, updated_at FROM `"+
		server.Project+"."+dataset+".rows_coverage` WHERE cluster = '"+cluster+"' AND inventory = 'apps'") {
		e := storedEntry{Coverage: export.Coverage{Target: v[0].(string), State: v1alpha1.CoverageState(v[1].(string)),
			Rows: v[2].(int64), ExtractionErrors: v[3].(int64), Reason: v[4].(string)}, UpdatedAt: v[5].(time.Time)}
		if _, dup := out[e.Target]; dup {
			tb.Fatalf("two coverage rows of target %s", e.Target)
		}
		out[e.Target] = e
	}
	return out
}

// rowMarks is every row's uid with its updated_at: a rewritten row gets the export's time.
func rowMarks(tb testing.TB, dataset, cluster string) map[string]string {
	tb.Helper()
	out := map[string]string{}
	for _, r := range rowsOf(tb, dataset, cluster) {
		out[r.Target+"/"+r.UID] = r.UpdatedAt.String()
	}
	return out
}

func stateTimes(tb testing.TB, dataset, cluster string) (exported, confirmed time.Time) {
	tb.Helper()
	rows := query(tb, "SELECT exported_at, confirmed_at FROM `"+server.Project+"."+dataset+".rows_state` WHERE cluster = '"+cluster+"' AND inventory = 'apps'")
	if len(rows) != 1 {
		tb.Fatalf("%d state rows of %s", len(rows), cluster)
	}
	return rows[0][0].(time.Time), rows[0][1].(time.Time)
}

// TestCoverageIsWrittenBesideTheRows, against the BigQuery emulator (a stand-in for BigQuery):
// the coverage lands in rows_coverage in the export's transaction; a batch whose only change
// is the coverage stages nothing and rewrites no row (every updated_at unchanged), rewrites
// only the entry that changed and keeps exported_at; the same batch again sends nothing but
// the state read; a denied target loses rows and keeps a deniedByScope entry; a target leaving
// the coverage loses its entry, and another cluster's entries are never touched.
func TestCoverageIsWrittenBesideTheRows(t *testing.T) {
	ctx := context.Background()
	ds := newDataset(t)
	s, rec := newSink(t, ds, "east")
	ws, _ := newSink(t, ds, "west")
	deps, svcs := mkRows("east", 4, 1), services("east", 2)
	all := append(append([]export.Row(nil), deps...), svcs...)
	a := &agent{sink: s, cluster: "east", inventory: "apps",
		coverage: []export.Coverage{complete("services", 2), complete("deployments", 4)}} // unsorted: the sink sorts
	if err := a.export(ctx, all); err != nil {
		t.Fatal(err)
	}
	west := &agent{sink: ws, cluster: "west", inventory: "apps", coverage: []export.Coverage{complete("deployments", 3), complete("services", 0)}}
	if err := west.export(ctx, mkRows("west", 3, 1)); err != nil {
		t.Fatal(err)
	}
	westBefore := storedCoverage(t, ds, "west")
	before := storedCoverage(t, ds, "east")
	if len(before) != 2 || before["deployments"].Coverage != complete("deployments", 4) || before["services"].Coverage != complete("services", 2) {
		t.Fatalf("after the first export east's coverage is %+v", before)
	}
	marks := rowMarks(t, ds, "east")
	exported, confirmed := stateTimes(t, ds, "east")
	rec.Calls()

	// Services turn forbidden: their rows are kept, the snapshot's checksum does not change.
	forbidden := export.Coverage{Target: "services", State: "forbidden", Rows: 2, ExtractionErrors: 1,
		Reason: `services is forbidden: User "system:serviceaccount:kollect:agent" cannot list resource "services"`}
	a.coverage = []export.Coverage{complete("deployments", 4), forbidden}
	b := a.batch(all)
	if b.Envelope.Checksum != b.PreviousChecksum || !b.Diff.Empty() {
		t.Fatalf("not a coverage-only batch: %s vs %s", b.Envelope.Checksum, b.PreviousChecksum)
	}
	if err := s.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	a.accept()
	if m := mutations(rec.Calls()); len(m) != 1 || m["query script"] != 1 {
		t.Fatalf("a coverage-only export sent %v, want one transaction and no staging", m)
	}
	if got := rowMarks(t, ds, "east"); !maps.Equal(got, marks) {
		t.Fatalf("a coverage-only export rewrote rows: %v -> %v", marks, got)
	}
	after := storedCoverage(t, ds, "east")
	if got := after["services"]; got.Coverage != forbidden || !got.UpdatedAt.After(before["services"].UpdatedAt) {
		t.Fatalf("services coverage %+v, want %+v with a later updated_at than %v", got, forbidden, before["services"].UpdatedAt)
	}
	if after["deployments"] != before["deployments"] {
		t.Fatalf("the unchanged entry was rewritten: %+v -> %+v", before["deployments"], after["deployments"])
	}
	if e, c := stateTimes(t, ds, "east"); !e.Equal(exported) || !c.Equal(confirmed) {
		t.Fatalf("a coverage-only export of an incomplete snapshot moved exported_at %v -> %v or confirmed_at %v -> %v", exported, e, confirmed, c)
	}

	// The same batch again: nothing but the state read.
	if err := a.export(ctx, all); err != nil {
		t.Fatal(err)
	}
	if m := mutations(rec.Calls()); len(m) != 0 {
		t.Fatalf("an export with the stored checksum and coverage sent %v", m)
	}
	if again := storedCoverage(t, ds, "east"); !maps.Equal(again, after) {
		t.Fatalf("an unchanged export changed the coverage: %+v -> %+v", after, again)
	}

	// Complete again: coverage only, and the export confirms.
	a.coverage = []export.Coverage{complete("deployments", 4), complete("services", 2)}
	b = a.batch(all)
	b.Envelope.ExportedAt = confirmed.Add(time.Minute)
	if err := s.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	a.accept()
	if e, c := stateTimes(t, ds, "east"); !e.Equal(exported) || !c.Equal(b.Envelope.ExportedAt.UTC().Truncate(time.Microsecond)) {
		t.Fatalf("a coverage-only export of a complete snapshot: exported_at %v (want %v), confirmed_at %v (want %v)", e, exported, c, b.Envelope.ExportedAt)
	}

	// A scope denies services: their rows go, their entry says why.
	denied := export.Coverage{Target: "services", State: "deniedByScope", Reason: "KollectScope team-a does not permit services"}
	a.coverage = []export.Coverage{complete("deployments", 4), denied}
	if err := a.export(ctx, deps); err != nil {
		t.Fatal(err)
	}
	for _, r := range rowsOf(t, ds, "east") {
		if r.Target == "services" {
			t.Fatalf("a row of a denied target remains: %+v", r)
		}
	}
	if got := storedCoverage(t, ds, "east")["services"].Coverage; got != denied {
		t.Fatalf("denied target's coverage %+v, want %+v", got, denied)
	}

	// Services leave the inventory: their entry goes, west's stay as they were.
	a.coverage = []export.Coverage{complete("deployments", 4)}
	if err := a.export(ctx, deps); err != nil {
		t.Fatal(err)
	}
	if got := storedCoverage(t, ds, "east"); len(got) != 1 || got["deployments"].Coverage != complete("deployments", 4) {
		t.Fatalf("after services left, east's coverage is %+v", got)
	}
	if westAfter := storedCoverage(t, ds, "west"); !maps.Equal(westAfter, westBefore) {
		t.Fatalf("east's exports touched west's coverage: %+v -> %+v", westBefore, westAfter)
	}

	// A confirmation keeps the coverage.
	kept := storedCoverage(t, ds, "east")
	if err := s.Confirm(ctx, sink.Confirmation{Cluster: "east", Inventory: "apps", Checksum: a.lastChecksum, At: time.Now().UTC(),
		Coverage: a.coverage}); err != nil {
		t.Fatal(err)
	}
	if got := storedCoverage(t, ds, "east"); !maps.Equal(got, kept) {
		t.Fatalf("a confirmation changed the coverage: %+v -> %+v", kept, got)
	}
}

// coverageQuery reads the SQL of the coverage question in docs/sinks/bigquery.md's Coverage
// section, so that the documented query is the tested one.
func coverageQuery(t *testing.T) string {
	t.Helper()
	_, section, ok := strings.Cut(readDoc(t), "\n## Coverage\n")
	if !ok {
		t.Fatal("docs/sinks/bigquery.md has no Coverage section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	for _, q := range sqlBlocks(section) {
		if strings.Contains(q, "coverage_state = 'complete'") {
			return q
		}
	}
	t.Fatal("the Coverage section has no query of complete coverage")
	return ""
}

// TestDocCoverageQueryAnswers runs the documented "Deployments in prod clusters whose data is
// complete and confirmed within 15 minutes" query, read from the page, against the emulator
// over a fleet with one cluster of each kind of answer: only prod-a's Deployments qualify.
func TestDocCoverageQueryAnswers(t *testing.T) {
	ctx := context.Background()
	ds := newDataset(t)
	exportAs := func(cluster string, deployments export.Coverage, at time.Time) {
		t.Helper()
		s, _ := newSink(t, ds, cluster)
		a := &agent{sink: s, cluster: cluster, inventory: "apps", coverage: []export.Coverage{deployments, complete("services", 1)}}
		b := a.batch(append(mkRows(cluster, 2, 1), services(cluster, 1)...))
		b.Envelope.ExportedAt = at
		if err := s.Export(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	exportAs("prod-a", complete("deployments", 2), now)                                          // the answer
	exportAs("prod-b", export.Coverage{Target: "deployments", State: "forbidden", Rows: 2}, now) // kept rows, unknown
	exportAs("prod-c", complete("deployments", 2), now.Add(-time.Hour))                          // complete, not confirmed lately
	exportAs("staging-a", complete("deployments", 2), now)                                       // not prod
	var got []string
	for _, r := range query(t, strings.ReplaceAll(coverageQuery(t), "acme-fleet.kollect.", server.Project+"."+ds+".")) {
		got = append(got, fmt.Sprintf("%v/%v/%v", r[0], r[1], r[2]))
	}
	if want := "prod-a/ns/app-000 prod-a/ns/app-001"; strings.Join(got, " ") != want {
		t.Fatalf("the documented query answers %v, want %s", got, want)
	}
}

// TestIncompleteExportKeepsConfirmedAt, against the BigQuery emulator: an export of changed
// rows while a target is forbidden moves exported_at but not confirmed_at (the kept rows are
// not confirmed current); the next complete export confirms again.
func TestIncompleteExportKeepsConfirmedAt(t *testing.T) {
	ctx := context.Background()
	ds := newDataset(t)
	s, _ := newSink(t, ds, "east")
	svcs := services("east", 2)
	a := &agent{sink: s, cluster: "east", inventory: "apps",
		coverage: []export.Coverage{complete("deployments", 4), complete("services", 2)}}
	if err := a.export(ctx, append(mkRows("east", 4, 1), svcs...)); err != nil {
		t.Fatal(err)
	}
	exported, confirmed := stateTimes(t, ds, "east")
	time.Sleep(10 * time.Millisecond) // the next export's time must differ from the first's
	a.coverage = []export.Coverage{complete("deployments", 5), {Target: "services", State: "forbidden", Rows: 2, Reason: "forbidden"}}
	if err := a.export(ctx, append(mkRows("east", 5, 1), svcs...)); err != nil {
		t.Fatal(err)
	}
	e, c := stateTimes(t, ds, "east")
	if !e.After(exported) || !c.Equal(confirmed) {
		t.Fatalf("an export of changed rows with a forbidden target: exported_at %v -> %v (must move), confirmed_at %v -> %v (must stay)",
			exported, e, confirmed, c)
	}
	a.coverage = []export.Coverage{complete("deployments", 4), complete("services", 2)}
	if err := a.export(ctx, append(mkRows("east", 4, 1), svcs...)); err != nil {
		t.Fatal(err)
	}
	if _, c2 := stateTimes(t, ds, "east"); !c2.After(c) {
		t.Fatalf("a complete export did not confirm: confirmed_at %v -> %v", c, c2)
	}
}
