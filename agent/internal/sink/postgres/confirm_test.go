package postgres

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
)

// TestConfirmMovesOnlyConfirmedAt: a confirmation is one UPDATE of the state row's
// confirmed_at — the rows table is not written and exported_at (the last change) stays — and
// a state that holds another checksum is ErrNotHeld, changing nothing.
func TestConfirmMovesOnlyConfirmedAt(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	s, rec := newSink(t, db, "east")
	a := &agent{sink: s, cluster: "east", inventory: "apps"}
	if err := a.export(ctx, sinktest.Deployments("east", "apps", 20, 1)); err != nil {
		t.Fatal(err)
	}
	rec.take()
	pool := connect(t, db)
	var exported, confirmed time.Time
	state := func() {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT exported_at, confirmed_at FROM kollect.rows_state WHERE cluster = 'east' AND inventory = 'apps'`).
			Scan(&exported, &confirmed); err != nil {
			t.Fatal(err)
		}
	}
	state()
	if !confirmed.Equal(exported) {
		t.Fatalf("an export confirms: confirmed_at %v, exported_at %v", confirmed, exported)
	}
	firstExport := exported

	at := exported.Add(5 * time.Minute).UTC()
	if err := s.Confirm(ctx, sink.Confirmation{Cluster: "east", Inventory: "apps", Checksum: a.lastChecksum, At: at}); err != nil {
		t.Fatal(err)
	}
	w := writes(rec.take())
	if len(w) != 1 || !strings.Contains(w[0], "rows_state") || !strings.Contains(w[0], "SET confirmed_at") {
		t.Fatalf("a confirmation wrote %q, want one UPDATE of the state row", w)
	}
	state()
	if !confirmed.Equal(at) || !exported.Equal(firstExport) {
		t.Fatalf("after the confirmation: confirmed_at %v (want %v), exported_at %v (want %v)", confirmed, at, exported, firstExport)
	}

	err := s.Confirm(ctx, sink.Confirmation{Cluster: "east", Inventory: "apps", Checksum: "sha256:another", At: at.Add(time.Minute)})
	if !errors.Is(err, sink.ErrNotHeld) {
		t.Fatalf("confirming a checksum the state does not hold: %v, want ErrNotHeld", err)
	}
	if err := s.Confirm(ctx, sink.Confirmation{Cluster: "east", Inventory: "other", Checksum: a.lastChecksum, At: at}); !errors.Is(err, sink.ErrNotHeld) {
		t.Fatalf("confirming an inventory without state: %v, want ErrNotHeld", err)
	}
	state()
	if !confirmed.Equal(at) {
		t.Fatalf("a refused confirmation moved confirmed_at to %v", confirmed)
	}
}

// TestDocQueriesRun runs every SELECT of docs/sinks/postgres.md against a schema an export
// created: the documented columns and views exist, and the freshness queries find the rows
// just exported and confirmed.
func TestDocQueriesRun(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	s := newHistorySink(t, db, "east") // the row history's queries too
	a := &agent{sink: s, cluster: "east", inventory: "apps"}
	if err := a.export(ctx, sinktest.Deployments("east", "apps", 5, 1)); err != nil {
		t.Fatal(err)
	}
	pool := connect(t, db)
	ran := 0
	for _, stmt := range docSelects(t) {
		rows, err := pool.Query(ctx, stmt)
		if err != nil {
			t.Fatalf("documented query fails: %v\n%s", err, stmt)
		}
		n := 0
		for rows.Next() {
			n++
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("documented query fails: %v\n%s", err, stmt)
		}
		// The coverage question asks for prod clusters, which this fleet has none of:
		// TestDocCoverageQueryAnswers checks its answer.
		if strings.Contains(stmt, "kind = 'Deployment'") && !strings.Contains(stmt, "coverage_state") && n == 0 {
			t.Errorf("documented query finds none of the exported Deployments:\n%s", stmt)
		}
		ran++
	}
	if ran < 5 {
		t.Fatalf("ran %d documented queries: did the page's SQL blocks move?", ran)
	}
}

// docSelects reads every SELECT statement of docs/sinks/postgres.md's sql blocks, leading
// comment lines removed.
func docSelects(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile("../../../../docs/sinks/postgres.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, block := range regexp.MustCompile("(?s)```sql\n(.*?)```").FindAllStringSubmatch(string(raw), -1) {
		for _, stmt := range strings.Split(block[1], ";") {
			stmt = strings.TrimSpace(stmt)
			for strings.HasPrefix(stmt, "--") { // a leading comment line
				_, stmt, _ = strings.Cut(stmt, "\n")
				stmt = strings.TrimSpace(stmt)
			}
			if strings.HasPrefix(strings.ToUpper(stmt), "SELECT") {
				out = append(out, stmt)
			}
		}
	}
	return out
}

// TestStateNamesItsWriter: the state row names the agent version and instance of the last
// export or confirmation; an upgraded agent that confirms, or re-sends the same snapshot in
// full after losing its state, renames the writer without rewriting a row (their xmin stays).
func TestStateNamesItsWriter(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	s, _ := newSink(t, db, "east")
	v1 := export.Writer{Version: "v0.1.0", Instance: "kollect-system@4f9c"}
	a := &agent{sink: s, cluster: "east", inventory: "apps", writer: v1}
	rows := sinktest.Deployments("east", "apps", 20, 1)
	if err := a.export(ctx, rows); err != nil {
		t.Fatal(err)
	}
	pool := connect(t, db)
	writer := func() export.Writer {
		t.Helper()
		var w export.Writer
		if err := pool.QueryRow(ctx, `SELECT agent_version, agent_instance FROM kollect.rows_state WHERE cluster = 'east' AND inventory = 'apps'`).
			Scan(&w.Version, &w.Instance); err != nil {
			t.Fatal(err)
		}
		return w
	}
	xmins := func() string {
		t.Helper()
		var s string
		if err := pool.QueryRow(ctx, `SELECT string_agg(uid || '@' || xmin::text, ',' ORDER BY uid) FROM kollect.rows`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if got := writer(); got != v1 {
		t.Fatalf("after an export the state names %+v, want %+v", got, v1)
	}
	before := xmins()

	v2 := export.Writer{Version: "v0.2.0", Instance: v1.Instance}
	if err := s.Confirm(ctx, sink.Confirmation{Cluster: "east", Inventory: "apps", Checksum: a.lastChecksum, At: time.Now().UTC(), Writer: v2}); err != nil {
		t.Fatal(err)
	}
	if got := writer(); got != v2 {
		t.Fatalf("after the upgraded agent's confirmation the state names %+v, want %+v", got, v2)
	}
	restarted := &agent{sink: s, cluster: "east", inventory: "apps", writer: v2}
	if err := restarted.export(ctx, rows); err != nil {
		t.Fatal(err)
	}
	if after := xmins(); after != before {
		t.Fatalf("the upgraded agent rewrote rows: %s -> %s", before, after)
	}
}
