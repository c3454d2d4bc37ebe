package postgres

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
)

var services, complete = sinktest.Services, sinktest.Complete

// coverageRow is one stored coverage entry with its row version.
type coverageRow struct {
	export.Coverage
	UpdatedAt time.Time
	Xmin      string
}

func storedCoverage(tb testing.TB, pool *pgxpool.Pool, cluster string) map[string]coverageRow {
	tb.Helper()
	rows, err := pool.Query(context.Background(), `SELECT target, state, rows, extraction_errors, reason, updated_at, xmin::text
  FROM kollect.rows_coverage WHERE cluster = $1 AND inventory = 'apps'`, cluster)
	if err != nil {
		tb.Fatal(err)
	}
	// Closed on every return: a t.Fatal below with the rows open kept the connection
	// acquired, and the pool's Close in the cleanup waited for it until the test timeout.
	defer rows.Close()
	out := map[string]coverageRow{}
	for rows.Next() {
		var c coverageRow
		if err := rows.Scan(&c.Target, &c.State, &c.Rows, &c.ExtractionErrors, &c.Reason, &c.UpdatedAt, &c.Xmin); err != nil {
			tb.Fatal(err)
		}
		out[c.Target] = c
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

// rowVersions is every row's uid@xmin of a cluster: a rewritten row gets a new xmin.
func rowVersions(tb testing.TB, pool *pgxpool.Pool, cluster string) string {
	tb.Helper()
	var s string
	if err := pool.QueryRow(context.Background(), `SELECT coalesce(string_agg(uid || '@' || xmin::text, ',' ORDER BY uid), '')
  FROM kollect.rows WHERE cluster = $1`, cluster).Scan(&s); err != nil {
		tb.Fatal(err)
	}
	return s
}

func stateTimes(tb testing.TB, pool *pgxpool.Pool, cluster string) (exported, confirmed time.Time) {
	tb.Helper()
	if err := pool.QueryRow(context.Background(), `SELECT exported_at, confirmed_at FROM kollect.rows_state
 WHERE cluster = $1 AND inventory = 'apps'`, cluster).Scan(&exported, &confirmed); err != nil {
		tb.Fatal(err)
	}
	return exported, confirmed
}

// TestCoverageIsWrittenBesideTheRows: the coverage lands in rows_coverage in the export's
// transaction; a batch whose only change is the coverage rewrites no row (xmin unchanged),
// rewrites only the entry that changed and keeps exported_at; the same batch again writes
// nothing; a denied target loses rows and keeps a deniedByScope entry; a target that leaves
// the coverage loses its entry, and another cluster's entries are never touched.
func TestCoverageIsWrittenBesideTheRows(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	s, rec := newSink(t, db, "east")
	ws, _ := newSink(t, db, "west")
	pool := connect(t, db)
	deps, svcs := sinktest.Deployments("east", "apps", 4, 1), services("east", "apps", 2)
	a := &agent{sink: s, cluster: "east", inventory: "apps",
		coverage: []export.Coverage{complete("services", 2), complete("deployments", 4)}} // unsorted: the sink sorts
	if err := a.export(ctx, append(append([]export.Row(nil), deps...), svcs...)); err != nil {
		t.Fatal(err)
	}
	west := &agent{sink: ws, cluster: "west", inventory: "apps", coverage: []export.Coverage{complete("deployments", 3), complete("services", 0)}}
	if err := west.export(ctx, sinktest.Deployments("west", "apps", 3, 1)); err != nil {
		t.Fatal(err)
	}
	westBefore := storedCoverage(t, pool, "west")

	// psql, as an operator would, sees both entries of east.
	url := strings.Replace(server.URL, "/postgres?", "/"+db+"?", 1)
	out, err := exec.Command("psql", url, "-tAc",
		"SELECT target, state, rows, extraction_errors FROM kollect.rows_coverage WHERE cluster = 'east' ORDER BY target").CombinedOutput()
	if err != nil {
		t.Fatalf("psql: %v: %s", err, out)
	}
	if got, want := strings.TrimSpace(string(out)), "deployments|complete|4|0\nservices|complete|2|0"; got != want {
		t.Fatalf("psql reads the coverage\n%s\nwant\n%s", got, want)
	}

	versions := rowVersions(t, pool, "east")
	before := storedCoverage(t, pool, "east")
	exported, confirmed := stateTimes(t, pool, "east")
	rec.take()

	// Services turn forbidden: their rows are kept, the snapshot's checksum does not change.
	forbidden := export.Coverage{Target: "services", State: "forbidden", Rows: 2, ExtractionErrors: 1,
		Reason: `services is forbidden: User "system:serviceaccount:kollect:agent" cannot list resource "services"`}
	a.coverage = []export.Coverage{complete("deployments", 4), forbidden}
	b := a.batch(append(append([]export.Row(nil), deps...), svcs...))
	if b.Envelope.Checksum != b.PreviousChecksum || !b.Diff.Empty() {
		t.Fatalf("not a coverage-only batch: %s vs %s, diff %+v", b.Envelope.Checksum, b.PreviousChecksum, b.Diff)
	}
	if err := s.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	a.accept()
	for _, w := range writes(rec.take()) {
		if !strings.Contains(w, "rows_coverage") && !strings.Contains(w, "rows_state") {
			t.Errorf("a coverage-only export wrote %q", w)
		}
	}
	if got := rowVersions(t, pool, "east"); got != versions {
		t.Fatalf("a coverage-only export rewrote rows: %s -> %s", versions, got)
	}
	after := storedCoverage(t, pool, "east")
	if got := after["services"]; got.Coverage != forbidden || !got.UpdatedAt.After(before["services"].UpdatedAt) {
		t.Fatalf("services coverage %+v, want %+v with a later updated_at than %v", got, forbidden, before["services"].UpdatedAt)
	}
	if after["deployments"] != before["deployments"] {
		t.Fatalf("the unchanged entry was rewritten: %+v -> %+v", before["deployments"], after["deployments"])
	}
	if e, c := stateTimes(t, pool, "east"); !e.Equal(exported) || !c.Equal(confirmed) {
		t.Fatalf("a coverage-only export of an incomplete snapshot moved exported_at %v -> %v or confirmed_at %v -> %v", exported, e, confirmed, c)
	}

	// The same batch again: nothing at all, on the server as in the statements sent.
	if err := a.export(ctx, append(append([]export.Row(nil), deps...), svcs...)); err != nil {
		t.Fatal(err)
	}
	if w := writes(rec.take()); len(w) != 0 {
		t.Fatalf("an export with the stored checksum and coverage wrote %q", w)
	}
	if again := storedCoverage(t, pool, "east"); again["services"] != after["services"] || again["deployments"] != after["deployments"] {
		t.Fatalf("an unchanged export rewrote coverage: %+v -> %+v", after, again)
	}

	// Complete again (the role came back): coverage only, and the export confirms.
	a.coverage = []export.Coverage{complete("deployments", 4), complete("services", 2)}
	b = a.batch(append(append([]export.Row(nil), deps...), svcs...))
	b.Envelope.ExportedAt = confirmed.Add(time.Minute)
	if err := s.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	a.accept()
	if e, c := stateTimes(t, pool, "east"); !e.Equal(exported) || !c.Equal(b.Envelope.ExportedAt.Truncate(time.Microsecond)) {
		t.Fatalf("a coverage-only export of a complete snapshot: exported_at %v (want %v), confirmed_at %v (want %v)", e, exported, c, b.Envelope.ExportedAt)
	}
	if got := rowVersions(t, pool, "east"); got != versions {
		t.Fatalf("a coverage-only export rewrote rows: %s -> %s", versions, got)
	}

	// A scope denies services: their rows go, their entry says why.
	denied := export.Coverage{Target: "services", State: "deniedByScope", Reason: "KollectScope team-a does not permit services"}
	a.coverage = []export.Coverage{complete("deployments", 4), denied}
	if err := a.export(ctx, deps); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM kollect.rows WHERE cluster = 'east' AND target = 'services'`); n != 0 {
		t.Fatalf("%d rows of a denied target remain", n)
	}
	if got := storedCoverage(t, pool, "east")["services"].Coverage; got != denied {
		t.Fatalf("denied target's coverage %+v, want %+v", got, denied)
	}

	// Services leave the inventory: their entry goes, west's stay as they were.
	a.coverage = []export.Coverage{complete("deployments", 4)}
	if err := a.export(ctx, deps); err != nil {
		t.Fatal(err)
	}
	if got := storedCoverage(t, pool, "east"); len(got) != 1 || got["deployments"].Coverage != complete("deployments", 4) {
		t.Fatalf("after services left, east's coverage is %+v", got)
	}
	westAfter := storedCoverage(t, pool, "west")
	if len(westAfter) != 2 || westAfter["deployments"] != westBefore["deployments"] || westAfter["services"] != westBefore["services"] {
		t.Fatalf("east's exports touched west's coverage: %+v -> %+v", westBefore, westAfter)
	}

	// A confirmation keeps the coverage.
	kept := storedCoverage(t, pool, "east")
	if err := s.Confirm(ctx, sink.Confirmation{Cluster: "east", Inventory: "apps", Checksum: a.lastChecksum, At: time.Now().UTC(),
		Coverage: a.coverage}); err != nil {
		t.Fatal(err)
	}
	if got := storedCoverage(t, pool, "east"); got["deployments"] != kept["deployments"] || len(got) != 1 {
		t.Fatalf("a confirmation changed the coverage: %+v -> %+v", kept, got)
	}
}

// TestDocCoverageQueryAnswers runs the documented "Deployments in prod clusters whose data is
// complete and confirmed within 15 minutes" query, as the page writes it, over a fleet with one
// cluster of each kind of answer: only prod-a's Deployments qualify.
func TestDocCoverageQueryAnswers(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	export1 := func(cluster string, deployments export.Coverage, at time.Time) {
		t.Helper()
		s, _ := newSink(t, db, cluster)
		a := &agent{sink: s, cluster: cluster, inventory: "apps", coverage: []export.Coverage{deployments, complete("services", 1)}}
		b := a.batch(append(sinktest.Deployments(cluster, "apps", 2, 1), services(cluster, "apps", 1)...))
		b.Envelope.ExportedAt = at
		if err := s.Export(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	export1("prod-a", complete("deployments", 2), now)                                          // the answer
	export1("prod-b", export.Coverage{Target: "deployments", State: "forbidden", Rows: 2}, now) // kept rows, unknown
	export1("prod-c", complete("deployments", 2), now.Add(-time.Hour))                          // complete, but not confirmed lately
	export1("staging-a", complete("deployments", 2), now)                                       // not prod
	var query string
	for _, stmt := range docSelects(t) {
		if strings.Contains(stmt, "coverage_state = 'complete'") && strings.Contains(stmt, "prod-") {
			query = stmt
		}
	}
	if query == "" {
		t.Fatal("docs/sinks/postgres.md has no coverage query for prod clusters")
	}
	rows, err := connect(t, db).Query(ctx, query)
	if err != nil {
		t.Fatalf("%v\n%s", err, query)
	}
	var got []string
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, vals[0].(string)+"/"+vals[1].(string)+"/"+vals[2].(string))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := "prod-a/ns-0/app-00000 prod-a/ns-1/app-00001"; strings.Join(got, " ") != want {
		t.Fatalf("the documented query answers %v, want %s", got, want)
	}
}

// TestIncompleteExportKeepsConfirmedAt: an export whose rows changed while a target is
// unknown moves exported_at (the change) but not confirmed_at: the kept rows of the unknown
// target are not confirmed current, as the delivery worker does not confirm them either.
func TestIncompleteExportKeepsConfirmedAt(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	s, _ := newSink(t, db, "east")
	pool := connect(t, db)
	svcs := services("east", "apps", 2)
	a := &agent{sink: s, cluster: "east", inventory: "apps",
		coverage: []export.Coverage{complete("deployments", 4), complete("services", 2)}}
	if err := a.export(ctx, append(sinktest.Deployments("east", "apps", 4, 1), svcs...)); err != nil {
		t.Fatal(err)
	}
	exported, confirmed := stateTimes(t, pool, "east")
	time.Sleep(10 * time.Millisecond) // the next export's time must differ from the first's
	a.coverage = []export.Coverage{complete("deployments", 5), {Target: "services", State: "forbidden", Rows: 2, Reason: "forbidden"}}
	if err := a.export(ctx, append(sinktest.Deployments("east", "apps", 5, 1), svcs...)); err != nil {
		t.Fatal(err)
	}
	e, c := stateTimes(t, pool, "east")
	if !e.After(exported) || !c.Equal(confirmed) {
		t.Fatalf("an export of changed rows with a forbidden target: exported_at %v -> %v (must move), confirmed_at %v -> %v (must stay)",
			exported, e, confirmed, c)
	}
	a.coverage = []export.Coverage{complete("deployments", 4), complete("services", 2)}
	if err := a.export(ctx, append(sinktest.Deployments("east", "apps", 4, 1), svcs...)); err != nil {
		t.Fatal(err)
	}
	if _, c2 := stateTimes(t, pool, "east"); !c2.After(c) {
		t.Fatalf("a complete export did not confirm: confirmed_at %v -> %v", c, c2)
	}
}
