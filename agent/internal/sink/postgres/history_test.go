package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
)

// newHistorySink is newSink with history: true and a pool of one connection, so that every
// statement of the sink runs in one backend and reaches pg_stat_user_tables in order.
func newHistorySink(tb testing.TB, db, cluster string) *Sink {
	tb.Helper()
	sp := spec(db)
	sp.History, sp.MaxConnections = true, 1
	s, err := open(context.Background(), sp, testEnv(cluster))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// version is one row of rows_history.
type version struct {
	uid, attrs string
	from       time.Time
	to         *time.Time
}

func (v version) String() string {
	to := "open"
	if v.to != nil {
		to = v.to.Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("%s %s [%s, %s)", v.uid, v.attrs, v.from.Format(time.RFC3339Nano), to)
}

// versions reads the history of a cluster, by uid and valid_from.
func versions(tb testing.TB, pool *pgxpool.Pool, cluster string) []version {
	tb.Helper()
	rows, err := pool.Query(context.Background(), `SELECT uid, attributes::text, valid_from, valid_to FROM kollect.rows_history
 WHERE cluster = $1 ORDER BY uid, valid_from`, cluster)
	if err != nil {
		tb.Fatal(err)
	}
	var out []version
	for rows.Next() {
		var v version
		if err := rows.Scan(&v.uid, &v.attrs, &v.from, &v.to); err != nil {
			tb.Fatal(err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

// asOf reads the uids and attributes kollect.rows_as_of(at) returns for cluster.
func asOf(tb testing.TB, pool *pgxpool.Pool, cluster string, at time.Time) string {
	tb.Helper()
	var s *string
	if err := pool.QueryRow(context.Background(), `SELECT string_agg(uid || '=' || attributes::text, ' ' ORDER BY uid)
  FROM kollect.rows_as_of($2) WHERE cluster = $1`, cluster, at).Scan(&s); err != nil {
		tb.Fatal(err)
	}
	if s == nil {
		return ""
	}
	return *s
}

// TestHistoryKeepsVersionsAndIntervals: with history: true the first export opens a version
// per row; a diff that changes, deletes and adds rows closes the changed and deleted rows'
// versions and opens the new ones at one instant, leaves the unchanged row's version alone,
// and rows_as_of (through SQL, Query's AsOf and the documented psql command) returns the rows
// of either side of that instant.
func TestHistoryKeepsVersionsAndIntervals(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	s := newHistorySink(t, db, "east")
	pool := connect(t, db)
	a := &agent{sink: s, cluster: "east", inventory: "apps"}
	row := func(i, replicas int) export.Row {
		return sinktest.Deployment("east", "apps", i, map[string]any{"replicas": replicas})
	}
	first := []export.Row{row(0, 1), row(1, 2), row(2, 3)}
	if err := a.export(ctx, first); err != nil {
		t.Fatal(err)
	}
	v1 := versions(t, pool, "east")
	if len(v1) != 3 || v1[0].to != nil || v1[1].to != nil || v1[2].to != nil || !v1[0].from.Equal(v1[2].from) {
		t.Fatalf("after the first export the history is %v, want three open versions from one instant", v1)
	}
	t1 := v1[0].from

	// Row 1 changes, row 2 goes, row 3 comes: a diff.
	second := []export.Row{row(0, 1), row(1, 5), row(3, 4)}
	if b := a.batch(second); b.Diff.Full {
		t.Fatal("the second export is not a diff")
	}
	if err := a.export(ctx, second); err != nil {
		t.Fatal(err)
	}
	v2 := versions(t, pool, "east")
	if len(v2) != 5 {
		t.Fatalf("after the diff the history is %v, want 5 versions", v2)
	}
	opened := v2[4].from // row 3's only version
	want := []version{
		{uid: "east-uid-00000", attrs: `{"replicas": 1}`, from: t1},
		{uid: "east-uid-00001", attrs: `{"replicas": 2}`, from: t1, to: &opened},
		{uid: "east-uid-00001", attrs: `{"replicas": 5}`, from: opened},
		{uid: "east-uid-00002", attrs: `{"replicas": 3}`, from: t1, to: &opened},
		{uid: "east-uid-00003", attrs: `{"replicas": 4}`, from: opened},
	}
	if fmt.Sprint(v2) != fmt.Sprint(want) {
		t.Fatalf("history after the diff:\n  %v\nwant\n  %v", v2, want)
	}
	if !opened.After(t1) {
		t.Fatalf("the diff's versions open at %s, not after the first export's %s", opened, t1)
	}

	before := "east-uid-00000={\"replicas\": 1} east-uid-00001={\"replicas\": 2} east-uid-00002={\"replicas\": 3}"
	after := "east-uid-00000={\"replicas\": 1} east-uid-00001={\"replicas\": 5} east-uid-00003={\"replicas\": 4}"
	for _, c := range []struct {
		at   time.Time
		want string
	}{
		{t1.Add(-time.Microsecond), ""},
		{t1, before},
		{opened.Add(-time.Microsecond), before},
		{opened, after},
		{time.Now().Add(time.Hour), after},
	} {
		if got := asOf(t, pool, "east", c.at); got != c.want {
			t.Errorf("rows_as_of(%s) = %q, want %q", c.at.Format(time.RFC3339Nano), got, c.want)
		}
	}

	// Query with AsOf (what kollect query --as-of runs) reads the same rows back whole.
	got, err := s.Query(ctx, sink.RowFilter{AsOf: t1, Kind: "Deployment"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("Query as of %s: %d rows, want 3", t1, len(got))
	}
	for i := range got {
		g, w := got[i].Row, first[i]
		if g.UID != w.UID || g.Name != w.Name || g.Profile != w.Profile || string(g.Attributes) != string(w.Attributes) || !got[i].UpdatedAt.Equal(t1) {
			t.Errorf("Query as of the first export: row %d is %+v, want %+v since %s", i, got[i], first[i], t1)
		}
	}

	// The documented read, as written but for the time.
	line := sinktest.DocCommand(t, "postgres.md", "rows_as_of(")
	line = strings.Replace(line, "2026-11-03T12:00:00Z", opened.UTC().Format(time.RFC3339Nano), 1)
	url := strings.Replace(server.URL, "/postgres?", "/"+db+"?", 1)
	out := sinktest.Shell(t, t.TempDir(), []string{"DATABASE_URL=" + url}, line)
	if wantOut := "east ns-0 app-00000 1\neast ns-1 app-00001 5\neast ns-3 app-00003 4\n"; out != wantOut {
		t.Fatalf("the documented as-of read printed %q, want %q", out, wantOut)
	}
}

// historyCounters reads pg_stat_user_tables' inserts and updates of rows_history.
func historyCounters(tb testing.TB, pool *pgxpool.Pool) (ins, upd int64) {
	tb.Helper()
	err := pool.QueryRow(context.Background(), `SELECT n_tup_ins, n_tup_upd FROM pg_stat_user_tables
 WHERE schemaname = 'kollect' AND relname = 'rows_history'`).Scan(&ins, &upd)
	if err != nil {
		tb.Fatal(err)
	}
	return ins, upd
}

// waitCounters polls historyCounters until inserts reach ins: the sink's backend reports its
// counters within seconds of a commit, not at once.
func waitCounters(tb testing.TB, pool *pgxpool.Pool, ins int64) (int64, int64) {
	tb.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for {
		gotIns, gotUpd := historyCounters(tb, pool)
		if gotIns >= ins {
			return gotIns, gotUpd
		}
		if time.Now().After(deadline) {
			tb.Fatalf("rows_history's n_tup_ins is %d after 45s, want %d", gotIns, ins)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestHistoryOfUnchangedDataWritesNothing: once the history holds the rows, an unchanged
// export, a new sink's first export (which checks the history against the rows), a resync
// of equal data and a confirmation insert and update no version. The evidence is
// PostgreSQL's own counters of rows_history over the window, closed by one change whose
// version (one insert, one update) must be all they count.
func TestHistoryOfUnchangedDataWritesNothing(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	s := newHistorySink(t, db, "east")
	pool := connect(t, db)
	a := &agent{sink: s, cluster: "east", inventory: "apps"}
	rows := sinktest.Deployments("east", "apps", 50, 1)
	if err := a.export(ctx, rows); err != nil {
		t.Fatal(err)
	}
	if ins, upd := waitCounters(t, pool, 50); ins != 50 || upd != 0 {
		t.Fatalf("the first export of 50 rows counted %d inserts and %d updates of rows_history", ins, upd)
	}

	// The window: the same snapshot as a diff; a restart (the sink forgets it seeded the
	// history and checks it against the rows again) with a full export of the same rows; a
	// resync; a confirmation.
	if err := a.export(ctx, rows); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.seeded = map[string]bool{}
	s.mu.Unlock()
	restarted := &agent{sink: s, cluster: "east", inventory: "apps"}
	if err := restarted.export(ctx, rows); err != nil {
		t.Fatal(err)
	}
	b := restarted.batch(rows)
	b.Resync = true
	if err := s.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := s.Confirm(ctx, sink.Confirmation{Cluster: "east", Inventory: "apps", Checksum: restarted.lastChecksum, At: time.Now()}); err != nil {
		t.Fatal(err)
	}

	// The change that closes the window: one row's new version.
	changed := slices.Clone(rows)
	changed[7] = sinktest.Deployment("east", "apps", 7, map[string]any{"replicas": 99})
	if err := restarted.export(ctx, changed); err != nil {
		t.Fatal(err)
	}
	if ins, upd := waitCounters(t, pool, 51); ins != 51 || upd != 1 {
		t.Fatalf("rows_history counted %d inserts and %d updates, want 51 and 1: the unchanged exports wrote history", ins, upd)
	}
	if n := count(t, pool, `SELECT count(*) FROM kollect.rows_history WHERE valid_to IS NULL`); n != 50 {
		t.Fatalf("%d open versions, want 50", n)
	}
}

// TestHistorySeedsAndCatchesUp: turning history on for a table that holds rows seeds one open
// version per row, even for an inventory that is only confirmed; rows changed and deleted
// while history was off again are closed, and the rows as they are opened, when it is turned
// on again.
func TestHistorySeedsAndCatchesUp(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	plain, _ := newSink(t, db, "east")
	pool := connect(t, db)
	a := &agent{sink: plain, cluster: "east", inventory: "apps"}
	rows := sinktest.Deployments("east", "apps", 5, 1)
	if err := a.export(ctx, rows); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM kollect.rows_history`); n != 0 {
		t.Fatalf("a sink without history wrote %d versions", n)
	}

	// On: the quiet inventory's confirmation seeds it.
	on := newHistorySink(t, db, "east")
	if err := on.Confirm(ctx, sink.Confirmation{Cluster: "east", Inventory: "apps", Checksum: a.lastChecksum, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM kollect.rows_history WHERE valid_to IS NULL`); n != 5 {
		t.Fatalf("after turning history on, %d open versions, want 5", n)
	}

	// Off: a row changes and one goes; the history does not follow.
	next := slices.Clone(rows[:4])
	next[1] = sinktest.Deployment("east", "apps", 1, map[string]any{"replicas": 42})
	if err := a.export(ctx, next); err != nil {
		t.Fatal(err)
	}
	// On again: its first (unchanged) export brings the history up to the rows.
	again := newHistorySink(t, db, "east")
	if err := (&agent{sink: again, cluster: "east", inventory: "apps", lastChecksum: a.lastChecksum}).export(ctx, next); err != nil {
		t.Fatal(err)
	}
	v := versions(t, pool, "east")
	var open, closed []string
	for _, x := range v {
		if x.to == nil {
			open = append(open, x.uid+"="+x.attrs)
		} else {
			closed = append(closed, x.uid)
		}
	}
	if got := strings.Join(closed, " "); got != "east-uid-00001 east-uid-00004" {
		t.Fatalf("closed versions %q, want rows 1 (changed) and 4 (deleted): %v", got, v)
	}
	if len(open) != 4 || !slices.Contains(open, `east-uid-00001={"replicas": 42}`) {
		t.Fatalf("open versions %q, want the 4 rows as they are", open)
	}
	if n := count(t, pool, `SELECT count(*) FROM kollect.rows_as_of(now()) h JOIN kollect.rows r USING (cluster, inventory, target, uid)
 WHERE r.attributes = h.attributes`); n != 4 {
		t.Fatalf("rows_as_of(now()) matches %d current rows, want 4", n)
	}
}

// TestPurgeRemovesTheClusterHistory: a purge deletes the cluster's versions with its rows and
// reports them; the other cluster's history stays.
func TestPurgeRemovesTheClusterHistory(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	pool := connect(t, db)
	for _, c := range []string{"east", "west"} {
		a := &agent{sink: newHistorySink(t, db, c), cluster: c, inventory: "apps"}
		if err := a.export(ctx, sinktest.Deployments(c, "apps", 3, 1)); err != nil {
			t.Fatal(err)
		}
		if err := a.export(ctx, sinktest.Deployments(c, "apps", 3, 2)); err != nil {
			t.Fatal(err)
		}
	}
	east := newHistorySink(t, db, "east")
	held, err := east.Holdings(ctx, "east", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 1 || held[0].Objects != 6 {
		t.Fatalf("east holds %+v, want 6 history versions in apps", held)
	}
	removed, err := east.Purge(ctx, "east", "", time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0].Objects != 6 || removed[0].Rows != 3 {
		t.Fatalf("the purge removed %+v, want 3 rows and 6 history versions", removed)
	}
	if got := len(versions(t, pool, "east")); got != 0 {
		t.Fatalf("east keeps %d versions after its purge", got)
	}
	if got := len(versions(t, pool, "west")); got != 6 {
		t.Fatalf("west has %d versions after east's purge, want 6", got)
	}
}

// TestPreviewShowsTheHistoryStatements: a sink with history: true previews the statements
// that keep rows_history beside the rows'; one without does not mention it.
func TestPreviewShowsTheHistoryStatements(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	plain, _ := newSink(t, db, "east")
	for s, want := range map[*Sink]bool{newHistorySink(t, db, "east"): true, plain: false} {
		p, err := s.Preview(ctx, "east", "apps")
		if err != nil {
			t.Fatal(err)
		}
		var exports []string
		for _, st := range p.Statements {
			if !strings.HasPrefix(st, "CREATE") && !strings.HasPrefix(st, "--") {
				exports = append(exports, st)
			}
		}
		if got := strings.Contains(strings.Join(exports, "\n"), `UPDATE "kollect"."rows_history" SET valid_to`); got != want {
			t.Errorf("history %v: the preview's export statements mention closing versions: %v\n%s", want, got, strings.Join(exports, "\n"))
		}
	}
}

// TestHistoryOfAFullReconcile: a full export (no diff the state can take: a resync) that
// changes a row and drops another closes their versions, opens the changed row's new one
// and leaves the equal rows' versions alone.
func TestHistoryOfAFullReconcile(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	s := newHistorySink(t, db, "east")
	pool := connect(t, db)
	a := &agent{sink: s, cluster: "east", inventory: "apps"}
	rows := sinktest.Deployments("east", "apps", 4, 1)
	if err := a.export(ctx, rows); err != nil {
		t.Fatal(err)
	}
	next := slices.Clone(rows[:3])
	next[0] = sinktest.Deployment("east", "apps", 0, map[string]any{"replicas": 7})
	b := a.batch(next)
	b.Resync = true
	if err := s.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range versions(t, pool, "east") {
		state := "open"
		if v.to != nil {
			state = "closed"
		}
		got = append(got, v.uid[len(v.uid)-1:]+" "+state)
	}
	if want := "0 closed,0 open,1 open,2 open,3 closed"; strings.Join(got, ",") != want {
		t.Fatalf("versions after a full reconcile: %s, want %s", strings.Join(got, ","), want)
	}
}
