package postgres

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
	"kollect.dev/testenv"
)

func TestTwoClustersShareOneDatabase(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	sa, _ := newSink(t, db, "east")
	sb, _ := newSink(t, db, "west")
	a := &agent{sink: sa, cluster: "east", inventory: "apps"}
	b := &agent{sink: sb, cluster: "west", inventory: "apps"}
	rowsA, rowsB := sinktest.Deployments("east", "apps", 5, 1), sinktest.Deployments("west", "apps", 4, 1)
	if err := a.export(ctx, rowsA); err != nil {
		t.Fatal(err)
	}
	if err := b.export(ctx, rowsB); err != nil {
		t.Fatal(err)
	}
	pool := connect(t, db)
	if got, want := len(stored(t, pool, "east")), 5; got != want {
		t.Fatalf("east holds %d rows, want %d", got, want)
	}
	if got, want := len(stored(t, pool, "west")), 4; got != want {
		t.Fatalf("west holds %d rows, want %d", got, want)
	}

	// Deleting one object removes exactly its row.
	gone := rowsA[2].UID
	if err := a.export(ctx, append(append([]export.Row(nil), rowsA[:2]...), rowsA[3:]...)); err != nil {
		t.Fatal(err)
	}
	east := stored(t, pool, "east")
	if _, ok := east[gone]; ok || len(east) != 4 {
		t.Fatalf("after deleting %s east holds %v", gone, east)
	}
	if len(stored(t, pool, "west")) != 4 {
		t.Fatal("deleting an east row touched west")
	}

	// A full reconcile of east (agent restarted with other data) leaves west alone.
	restarted := &agent{sink: sa, cluster: "east", inventory: "apps"}
	if err := restarted.export(ctx, sinktest.Deployments("east", "apps", 2, 2)); err != nil {
		t.Fatal(err)
	}
	if got := len(stored(t, pool, "east")); got != 2 {
		t.Fatalf("east holds %d rows after reconcile, want 2", got)
	}
	if got := len(stored(t, pool, "west")); got != 4 {
		t.Fatalf("east's reconcile changed west: %d rows", got)
	}
	// An empty snapshot deletes every row of east's inventory and nothing else.
	if err := restarted.export(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := len(stored(t, pool, "east")); got != 0 {
		t.Fatalf("east holds %d rows after an empty export", got)
	}
	if got := count(t, pool, `SELECT item_count FROM kollect.rows_state WHERE cluster = 'east'`); got != 0 {
		t.Fatalf("state item_count = %d", got)
	}
	if got := len(stored(t, pool, "west")); got != 4 {
		t.Fatalf("west lost rows: %d", got)
	}
}

func TestSameInventoryNameInTwoClustersOnlyDiffersByCluster(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	s, _ := newSink(t, db, "east")
	// A sink refuses rows of another cluster: its deletes are bounded by its own cluster.
	b := (&agent{sink: s, cluster: "west", inventory: "apps"}).batch(sinktest.Deployments("west", "apps", 1, 1))
	if err := s.Export(ctx, b); sink.ClassOf(err) != sink.Terminal {
		t.Fatalf("exporting west's rows through east's sink: %v", err)
	}
	a := &agent{sink: s, cluster: "east", inventory: "apps"}
	bad := a.batch(sinktest.Deployments("east", "apps", 2, 1))
	bad.Envelope.Rows[1] = bad.Envelope.Rows[1].With(func(o *export.Origin) { o.Cluster = "west" })
	if err := s.Export(ctx, bad); sink.ClassOf(err) != sink.Terminal {
		t.Fatalf("a stray row of another cluster was accepted: %v", err)
	}
}

func TestUnchangedDataWritesNothing(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	s, rec := newSink(t, db, "east")
	a := &agent{sink: s, cluster: "east", inventory: "apps"}
	rows := sinktest.Deployments("east", "apps", 50, 1)
	if err := a.export(ctx, rows); err != nil {
		t.Fatal(err)
	}
	if w := writes(rec.take()); len(w) == 0 {
		t.Fatal("the first export wrote nothing")
	}
	pool := connect(t, db)
	var before time.Time
	if err := pool.QueryRow(ctx, `SELECT max(updated_at) FROM kollect.rows`).Scan(&before); err != nil {
		t.Fatal(err)
	}

	// The same snapshot again, as a diff: nothing is written.
	if err := a.export(ctx, rows); err != nil {
		t.Fatal(err)
	}
	if w := writes(rec.take()); len(w) != 0 {
		t.Fatalf("an unchanged export wrote: %q", w)
	}

	// A restart: a new sink instance, the previous checksum from the inventory's status and a
	// Full diff because the delivery worker lost its snapshot. Still nothing is written.
	s2, rec2 := newSink(t, db, "east")
	restarted := &agent{sink: s2, cluster: "east", inventory: "apps", lastChecksum: a.lastChecksum}
	if err := restarted.export(ctx, rows); err != nil {
		t.Fatal(err)
	}
	if w := writes(rec2.take()); len(w) != 0 {
		t.Fatalf("an unchanged export after a restart wrote: %q", w)
	}
	// Even without any status (PreviousChecksum unknown) the state table short-cuts it.
	fresh := &agent{sink: s2, cluster: "east", inventory: "apps"}
	if err := fresh.export(ctx, rows); err != nil {
		t.Fatal(err)
	}
	if w := writes(rec2.take()); len(w) != 0 {
		t.Fatalf("an unchanged export without status wrote: %q", w)
	}
	var after time.Time
	if err := pool.QueryRow(ctx, `SELECT max(updated_at) FROM kollect.rows`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if !after.Equal(before) {
		t.Fatalf("updated_at moved from %v to %v without a change", before, after)
	}

	// A resync re-sends everything; equal rows are not rewritten.
	b := restarted.batch(rows)
	b.Resync = true
	if err := s2.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT max(updated_at) FROM kollect.rows`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if !after.Equal(before) {
		t.Fatal("a resync of equal data rewrote rows")
	}
}

func TestChangedRowOnlyTouchesThatRow(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	s, _ := newSink(t, db, "east")
	a := &agent{sink: s, cluster: "east", inventory: "apps"}
	rows := sinktest.Deployments("east", "apps", 10, 1)
	if err := a.export(ctx, rows); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	changed := append([]export.Row(nil), rows...)
	changed[4] = sinktest.Deployment("east", "apps", 4, map[string]any{"replicas": 99})
	if err := a.export(ctx, changed); err != nil {
		t.Fatal(err)
	}
	pool := connect(t, db)
	if got := count(t, pool, `SELECT count(*) FROM kollect.rows WHERE updated_at > first_seen`); got != 1 {
		t.Fatalf("%d rows have a new updated_at, want 1", got)
	}
	if got := stored(t, pool, "east")[rows[4].UID]; got != `{"replicas": 99}` {
		t.Fatalf("changed row holds %s", got)
	}
}

func TestMismatchedStateTriggersFullReconcile(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	s, _ := newSink(t, db, "east")
	other, _ := newSink(t, db, "west")
	a := &agent{sink: s, cluster: "east", inventory: "apps"}
	if err := a.export(ctx, sinktest.Deployments("east", "apps", 6, 1)); err != nil {
		t.Fatal(err)
	}
	if err := (&agent{sink: other, cluster: "west", inventory: "apps"}).export(ctx, sinktest.Deployments("west", "apps", 3, 1)); err != nil {
		t.Fatal(err)
	}
	// Drift behind the agent's back: a foreign row in east's inventory, a deleted row, and a
	// state checksum that matches neither side.
	pool := connect(t, db)
	for _, q := range []string{
		`INSERT INTO kollect.rows (cluster, inventory, target, api_group, version, kind, namespace, name, uid, attributes)
		 VALUES ('east', 'apps', 'deployments', 'apps', 'v1', 'Deployment', 'x', 'stray', 'stray-uid', '{}')`,
		`DELETE FROM kollect.rows WHERE cluster = 'east' AND uid = 'east-uid-00001'`,
		`UPDATE kollect.rows_state SET checksum = 'sha256:drifted' WHERE cluster = 'east'`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	next := sinktest.Deployments("east", "apps", 6, 1)
	next[0] = sinktest.Deployment("east", "apps", 0, map[string]any{"replicas": 7})
	if err := a.export(ctx, next); err != nil {
		t.Fatal(err)
	}
	east := stored(t, pool, "east")
	if len(east) != 6 {
		t.Fatalf("east holds %d rows after reconcile, want 6: %v", len(east), east)
	}
	if _, ok := east["stray-uid"]; ok {
		t.Fatal("the stray row survived the reconcile")
	}
	if _, ok := east["east-uid-00001"]; !ok {
		t.Fatal("the deleted row was not restored")
	}
	if len(stored(t, pool, "west")) != 3 {
		t.Fatal("east's reconcile touched west")
	}
	var sum string
	if err := pool.QueryRow(ctx, `SELECT checksum FROM kollect.rows_state WHERE cluster = 'east'`).Scan(&sum); err != nil || sum != a.lastChecksum {
		t.Fatalf("state checksum %q (%v), want %q", sum, err, a.lastChecksum)
	}
}

func TestInterruptedExportConverges(t *testing.T) {
	for _, tc := range []struct {
		name      string
		interrupt func(t *testing.T, cancel context.CancelFunc, admin *pgxpool.Pool) func(ctx context.Context, conn *pgx.Conn)
	}{
		{"context cancelled during COPY", func(_ *testing.T, cancel context.CancelFunc, _ *pgxpool.Pool) func(context.Context, *pgx.Conn) {
			return func(context.Context, *pgx.Conn) { cancel() }
		}},
		{"connection killed during COPY", func(t *testing.T, _ context.CancelFunc, admin *pgxpool.Pool) func(context.Context, *pgx.Conn) {
			return func(context.Context, *pgx.Conn) {
				// The server process of the export's transaction, the only one of the database
				// inside a transaction: not the connection's PID, which behind PgBouncer is
				// PgBouncer's (its cancel key), not a backend's.
				var killed int
				if err := admin.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
  FROM pg_stat_activity WHERE datname = current_database() AND state = 'idle in transaction'`).Scan(&killed); err != nil || killed != 1 {
					t.Errorf("terminating the export's backend: %d terminated, %v", killed, err)
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			db := newDatabase(t)
			s, rec := newSink(t, db, "east")
			pool := connect(t, db)
			a := &agent{sink: s, cluster: "east", inventory: "apps"}
			if err := a.export(ctx, sinktest.Deployments("east", "apps", 2000, 1)); err != nil {
				t.Fatal(err)
			}
			committed := stored(t, pool, "east")

			// The next export changes every row and dies mid-COPY.
			next := sinktest.Deployments("east", "apps", 3000, 2)
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			rec.mu.Lock()
			rec.onCopy = tc.interrupt(t, cancel, pool)
			rec.mu.Unlock()
			err := a.export(cctx, next)
			rec.mu.Lock()
			rec.onCopy = nil
			rec.mu.Unlock()
			if err == nil {
				t.Fatal("the interrupted export succeeded")
			}
			if sink.ClassOf(err) != sink.Transient {
				t.Fatalf("an interrupted export is %s: %v", sink.ClassOf(err), err)
			}
			if got := stored(t, pool, "east"); len(got) != len(committed) || got[next[0].UID] != committed[next[0].UID] {
				t.Fatalf("the interrupted export left a partial write: %d rows", len(got))
			}
			// The delivery worker retries the same batch (its PreviousChecksum is still the committed one).
			if err := a.export(ctx, next); err != nil {
				t.Fatal(err)
			}
			if got := stored(t, pool, "east"); len(got) != 3000 {
				t.Fatalf("after the retry east holds %d rows, want 3000", len(got))
			}
			if got := count(t, pool, `SELECT count(*) FROM kollect.rows WHERE attributes->>'image' <> 'registry.example/app:2'`); got != 0 {
				t.Fatalf("%d rows kept old content", got)
			}
		})
	}
}

func TestLargeUnicodeNestedAttributesRoundTrip(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	s, _ := newSink(t, db, "east")
	big := strings.Repeat("ü✓ab", 1<<20/7) // about 1 MiB of multi-byte text
	attrs := map[string]any{
		"name":   "名前 — ☸ é",
		"big":    big,
		"nested": map[string]any{"a": []any{1, "two", map[string]any{"three": true, "nil": nil}}, "z": 1.5},
		"quote":  `"'\` + "\n\t",
		"images": []any{"nginx:1.27", "redis@sha256:abc"},
	}
	row := sinktest.Deployment("east", "apps", 1, attrs)
	row.Name = "ünïcödé-名前"
	a := &agent{sink: s, cluster: "east", inventory: "apps"}
	if err := a.export(ctx, []export.Row{row}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Query(ctx, sink.RowFilter{Cluster: "east"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("query returned %d rows", len(got))
	}
	if string(got[0].CanonicalJSON()) != string(row.CanonicalJSON()) {
		t.Fatalf("row did not round-trip:\n got %.300s\nwant %.300s", got[0].CanonicalJSON(), row.CanonicalJSON())
	}
	// The exported row set is unchanged by the round trip: exporting it again writes nothing.
	if err := a.export(ctx, []export.Row{got[0].Row}); err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentExportsOfOneInventorySerialise(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := range 4 {
		s, _ := newSink(t, db, "east")
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- (&agent{sink: s, cluster: "east", inventory: "apps"}).export(ctx, sinktest.Deployments("east", "apps", 500+i, 1))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	pool := connect(t, db)
	n := len(stored(t, pool, "east"))
	if items := count(t, pool, `SELECT item_count FROM kollect.rows_state`); n != items || n < 500 || n > 503 {
		t.Fatalf("rows %d, state item_count %d: the exports interleaved", n, items)
	}
}

func TestMigrationsRunOnceUnderConcurrency(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	pool := connect(t, db)
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := migrate(ctx, pool, names{schema: "kollect", table: "rows"})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	all, _ := migrations(names{schema: "kollect", table: "rows"})
	if got := count(t, pool, `SELECT count(*) FROM kollect.schema_migrations WHERE table_name = 'rows'`); got != len(all) {
		t.Fatalf("ledger holds %d versions, want %d", got, len(all))
	}
	if applied, err := migrate(ctx, pool, names{schema: "kollect", table: "rows"}); err != nil || applied != 0 {
		t.Fatalf("re-running migrations applied %d (%v)", applied, err)
	}
}

func TestCustomSchemaAndTableNamesAreQuoted(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	sp := spec(db)
	sp.Schema, sp.Table = "select", "order" // reserved words only work quoted
	s, err := open(ctx, sp, testEnv("east"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a := &agent{sink: s, cluster: "east", inventory: "apps"}
	if err := a.export(ctx, sinktest.Deployments("east", "apps", 3, 1)); err != nil {
		t.Fatal(err)
	}
	pool := connect(t, db)
	if got := count(t, pool, `SELECT count(*) FROM "select"."order"`); got != 3 {
		t.Fatalf("custom table holds %d rows", got)
	}
	if got := count(t, pool, `SELECT count(*) FROM "select"."order_counts"`); got != 1 {
		t.Fatalf("custom views: %d count rows", got)
	}
}

func TestDroppedTableIsRecreatedOnRetry(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	s, _ := newSink(t, db, "east")
	a := &agent{sink: s, cluster: "east", inventory: "apps"}
	if err := a.export(ctx, sinktest.Deployments("east", "apps", 3, 1)); err != nil {
		t.Fatal(err)
	}
	pool := connect(t, db)
	if _, err := pool.Exec(ctx, `DROP SCHEMA kollect CASCADE`); err != nil {
		t.Fatal(err)
	}
	err := a.export(ctx, sinktest.Deployments("east", "apps", 4, 1))
	if err == nil || sink.ClassOf(err) != sink.Transient {
		t.Fatalf("export into a dropped schema: %v", err)
	}
	if err := a.export(ctx, sinktest.Deployments("east", "apps", 4, 1)); err != nil {
		t.Fatal(err)
	}
	if got := len(stored(t, pool, "east")); got != 4 {
		t.Fatalf("after re-creation east holds %d rows", got)
	}
}

// TestExportToAClosedPortSaysConnectionRefused: the first export's error (the schema
// migration is its first statement) names the refused connection and the address, not only
// "failed to connect", and is transient.
func TestExportToAClosedPortSaysConnectionRefused(t *testing.T) {
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	sp := spec("postgres")
	sp.Port = int32(port)
	s, err := open(t.Context(), sp, testEnv("c1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	err = s.Export(t.Context(), &sink.Batch{Envelope: export.Envelope{Cluster: "c1", Inventory: "ns/inv", Checksum: "x"}})
	if err == nil {
		t.Fatal("an export to a closed port succeeded")
	}
	if msg := err.Error(); !strings.Contains(msg, fmt.Sprintf("connection refused by 127.0.0.1:%d", port)) || strings.Contains(msg, ": migrating: failed") {
		t.Fatalf("error %q does not say the connection to port %d was refused", msg, port)
	}
	if c := sink.ClassOf(err); c != sink.Transient {
		t.Fatalf("class %s, want transient", c)
	}
	t.Log(err)
}

// TestSinksOfOneDestinationCheckTheSchemaOnce: the sinks of several tenants writing one table
// share its migration check in the process, and a dropped table makes them migrate again.
func TestSinksOfOneDestinationCheckTheSchemaOnce(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	sa, _ := newSink(t, db, "east")
	sb, recB := newSink(t, db, "east")
	if err := (&agent{sink: sa, cluster: "east", inventory: "team-a/apps"}).export(ctx, sinktest.Deployments("east", "team-a/apps", 3, 1)); err != nil {
		t.Fatal(err)
	}
	recB.take()
	b := &agent{sink: sb, cluster: "east", inventory: "team-b/apps"}
	if err := b.export(ctx, sinktest.Deployments("east", "team-b/apps", 2, 1)); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range recB.take() {
		if strings.Contains(stmt, "schema_migrations") {
			t.Fatalf("the second sink of the table checked the migrations again: %s", stmt)
		}
	}
	pool := connect(t, db)
	if _, err := pool.Exec(ctx, "DROP SCHEMA kollect CASCADE"); err != nil {
		t.Fatal(err)
	}
	// The first export finds the table gone; its retry migrates, for every sink of the table.
	if err := b.export(ctx, sinktest.Deployments("east", "team-b/apps", 2, 2)); err == nil {
		t.Fatal("an export to a dropped table succeeded")
	}
	if err := b.export(ctx, sinktest.Deployments("east", "team-b/apps", 2, 2)); err != nil {
		t.Fatalf("the retry after the table was dropped: %v", err)
	}
	if err := (&agent{sink: sa, cluster: "east", inventory: "team-a/apps"}).export(ctx, sinktest.Deployments("east", "team-a/apps", 3, 2)); err != nil {
		t.Fatalf("the other sink after the table was re-created: %v", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM kollect.rows WHERE cluster = 'east'`); n != 5 {
		t.Fatalf("after the re-creation the table holds %d rows, want 5", n)
	}
}
