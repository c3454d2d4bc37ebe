package postgres

import (
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
	"kollect.dev/testenv"
)

// contract are the package's tests that make up the sink's contract with a database, each run
// as written through the real PgBouncer (Debian's) by TestContractThroughPgBouncer: the sinks
// they build connect to PgBouncer (spec), their assertions read PostgreSQL directly (connect).
var contract = []struct {
	name string
	run  func(*testing.T)
}{
	{"TestTwoClustersShareOneDatabase", TestTwoClustersShareOneDatabase},
	{"TestUnchangedDataWritesNothing", TestUnchangedDataWritesNothing},
	{"TestChangedRowOnlyTouchesThatRow", TestChangedRowOnlyTouchesThatRow},
	{"TestMismatchedStateTriggersFullReconcile", TestMismatchedStateTriggersFullReconcile},
	{"TestInterruptedExportConverges", TestInterruptedExportConverges},
	{"TestLargeUnicodeNestedAttributesRoundTrip", TestLargeUnicodeNestedAttributesRoundTrip},
	{"TestConcurrentExportsOfOneInventorySerialise", TestConcurrentExportsOfOneInventorySerialise},
	{"TestCustomSchemaAndTableNamesAreQuoted", TestCustomSchemaAndTableNamesAreQuoted},
	{"TestDroppedTableIsRecreatedOnRetry", TestDroppedTableIsRecreatedOnRetry},
	{"TestSinksOfOneDestinationCheckTheSchemaOnce", TestSinksOfOneDestinationCheckTheSchemaOnce},
	{"TestSecondWriterIsRefused", TestSecondWriterIsRefused},
	{"TestConfirmMovesOnlyConfirmedAt", TestConfirmMovesOnlyConfirmedAt},
	{"TestCoverageIsWrittenBesideTheRows", TestCoverageIsWrittenBesideTheRows},
	{"TestHistoryKeepsVersionsAndIntervals", TestHistoryKeepsVersionsAndIntervals},
	{"TestPurgeRemovesOneClusterOnly", TestPurgeRemovesOneClusterOnly},
	{"TestPurgeChecksTheCutoffUnderTheExportLock", TestPurgeChecksTheCutoffUnderTheExportLock},
	{"TestProbeSucceedsWithoutWriting", TestProbeSucceedsWithoutWriting},
	{"TestPreviewListsPendingDDLThenOnlyExportStatements", TestPreviewListsPendingDDLThenOnlyExportStatements},
	{"TestQueryFilters", TestQueryFilters},
}

var iniBlock = regexp.MustCompile("(?s)```ini\n(.*?)```")

// docBouncerConfig returns the pgbouncer.ini fragment of docs/sinks/postgres.md's "For a
// fleet" section, which TestContractThroughPgBouncer runs as written.
func docBouncerConfig(t *testing.T) string {
	t.Helper()
	page := string(sinktest.DocFile(t, "sinks/postgres.md"))
	_, section, ok := strings.Cut(page, "\n## For a fleet\n")
	if !ok {
		t.Fatal(`docs/sinks/postgres.md has no section "For a fleet"`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	blocks := iniBlock.FindAllStringSubmatch(section, -1)
	if len(blocks) != 1 || !strings.Contains(blocks[0][1], "pool_mode = transaction") {
		t.Fatalf("docs/sinks/postgres.md, For a fleet: %d ini blocks, want the one pgbouncer.ini fragment in transaction pooling", len(blocks))
	}
	return blocks[0][1]
}

// useBouncer starts the real PgBouncer in front of the package's server and makes the sinks
// the test builds connect through it.
func useBouncer(t *testing.T, opts testenv.PgBouncerOptions) *testenv.PgBouncer {
	t.Helper()
	b, err := testenv.StartPgBouncer(server, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	bouncer = b
	t.Cleanup(func() { bouncer = nil })
	return b
}

// TestContractThroughPgBouncer runs the sink's contract through the real PgBouncer, in
// transaction pooling with the documented pgbouncer.ini fragment as written, and in session
// pooling. Before the agent ran pgx without named prepared statements and without the
// statement_timeout startup parameter, every connection was refused ("unsupported startup
// parameter: statement_timeout"), and with that parameter ignored, transaction pooling failed
// exports with "prepared statement stmtcache_… already exists".
func TestContractThroughPgBouncer(t *testing.T) {
	for _, tc := range []struct {
		mode string
		opts testenv.PgBouncerOptions
	}{
		{"transaction", testenv.PgBouncerOptions{Config: docBouncerConfig(t)}},
		{"session", testenv.PgBouncerOptions{PoolMode: "session"}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			b := useBouncer(t, tc.opts)
			if b.PoolMode != tc.mode {
				t.Fatalf("PgBouncer runs in %s pooling, want %s", b.PoolMode, tc.mode)
			}
			for _, c := range contract {
				t.Run(c.name, c.run)
			}
		})
	}
}

// TestStatementTimeoutIsPerTransaction: statementTimeout bounds an export's statements, here a
// wait for the inventory's lock that another session holds (the export fails, transient, with
// PostgreSQL's statement timeout, and the retry succeeds), directly and through transaction
// pooling, and it is set for the transaction only: the next client of PgBouncer's one server
// connection finds PostgreSQL's default.
func TestStatementTimeoutIsPerTransaction(t *testing.T) {
	for _, route := range []string{"direct", "transaction"} {
		t.Run(route, func(t *testing.T) {
			var b *testenv.PgBouncer
			if route != "direct" {
				b = useBouncer(t, testenv.PgBouncerOptions{PoolMode: route, PoolSize: 1})
			}
			ctx := t.Context()
			db := newDatabase(t)
			// The migrations and the first load run with the default timeout.
			s, _ := newSink(t, db, "east")
			if err := (&agent{sink: s, cluster: "east", inventory: "apps"}).export(ctx, sinktest.Deployments("east", "apps", 3, 1)); err != nil {
				t.Fatal(err)
			}
			sp := spec(db)
			sp.StatementTimeout = metav1.Duration{Duration: 300 * time.Millisecond}
			short, err := open(ctx, sp, testEnv("east"))
			if err != nil {
				t.Fatal(err)
			}
			defer short.Close()
			a := &agent{sink: short, cluster: "east", inventory: "apps"}

			admin := connect(t, db)
			tx, err := admin.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if err := lockInventory(ctx, tx, names{schema: "kollect", table: "rows"}, "east", "apps"); err != nil {
				t.Fatal(err)
			}
			err = a.export(ctx, sinktest.Deployments("east", "apps", 3, 2))
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "57014" || sink.ClassOf(err) != sink.Transient {
				t.Fatalf("an export waiting on a held lock: %v, want a transient statement timeout (SQLSTATE 57014)", err)
			}
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			if err := a.export(ctx, sinktest.Deployments("east", "apps", 3, 2)); err != nil {
				t.Fatalf("the retry once the lock is free: %v", err)
			}
			if b == nil {
				return
			}
			// psql through PgBouncer gets its one server connection, which ran the exports.
			out, err := exec.CommandContext(ctx, "psql", b.URL("postgres", db), "-X", "-qAtc", "SHOW statement_timeout").CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "0" {
				t.Fatalf("statement_timeout on PgBouncer's server connection after the exports: %q (%v), want PostgreSQL's default 0", out, err)
			}
		})
	}
}

// TestPgBouncerSharesServerConnections: 6 sinks (6 clusters) export 2 inventories each at once
// while the test holds a lock their writes wait for, so every export is inside its transaction
// at the same moment, and counts server connections there. Directly and through session
// pooling PostgreSQL serves the 12 with 12 backends; through transaction pooling with
// default_pool_size = 3 it serves them with 3, PgBouncer's SHOW POOLS showing 3 server
// connections linked and the 9 other exports waiting for one. Every export commits once the
// lock is released, and SHOW STATS counts their transactions. The figures are logged for
// docs/sinks/postgres.md ("Measured").
func TestPgBouncerSharesServerConnections(t *testing.T) {
	const clusters, inventories, poolSize = 6, 2, 3
	const exports = clusters * inventories
	for _, tc := range []struct {
		route string
		opts  *testenv.PgBouncerOptions
		// servers is how many backends serve the exports at the peak.
		servers int
	}{
		{"direct", nil, exports},
		{"transaction", &testenv.PgBouncerOptions{PoolMode: "transaction", PoolSize: poolSize}, poolSize},
		{"session", &testenv.PgBouncerOptions{PoolMode: "session"}, exports},
	} {
		t.Run(tc.route, func(t *testing.T) {
			var b *testenv.PgBouncer
			if tc.opts != nil {
				b = useBouncer(t, *tc.opts)
			}
			ctx := t.Context()
			db := newDatabase(t)
			var agents []*agent
			for c := range clusters {
				cluster := fmt.Sprintf("c%d", c)
				s, _ := newSink(t, db, cluster)
				for i := range inventories {
					a := &agent{sink: s, cluster: cluster, inventory: fmt.Sprintf("inv%d", i)}
					if err := a.export(ctx, sinktest.Deployments(cluster, a.inventory, 3, 1)); err != nil {
						t.Fatal(err)
					}
					agents = append(agents, a)
				}
			}
			admin := connect(t, db)
			lock, err := admin.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer lock.Rollback(ctx)
			// Reads go on; the exports' upserts wait.
			if _, err := lock.Exec(ctx, "LOCK TABLE kollect.rows IN EXCLUSIVE MODE"); err != nil {
				t.Fatal(err)
			}
			locker := lock.Conn().PgConn().PID()
			errs := make(chan error, exports)
			for _, a := range agents {
				go func() { errs <- a.export(ctx, sinktest.Deployments(a.cluster, a.inventory, 3, 2)) }()
			}

			// The peak: every export inside its transaction, each on a backend waiting for the
			// lock or (transaction pooling) waiting in PgBouncer for a server connection.
			var backends, waiting int
			var pool testenv.PgBouncerPool
			waitUntil(t, "every export inside its transaction", func() bool {
				if err := admin.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE wait_event_type = 'Lock')
  FROM pg_stat_activity WHERE datname = current_database() AND pid NOT IN (pg_backend_pid(), $1)`, locker).Scan(&backends, &waiting); err != nil {
					t.Fatal(err)
				}
				if b == nil {
					return waiting == exports
				}
				if pool, err = b.Pool(ctx, db, "postgres"); err != nil {
					t.Fatal(err)
				}
				return waiting == tc.servers && pool.SvActive == tc.servers && pool.ClWaiting == exports-tc.servers
			})
			if backends != tc.servers || (tc.route == "transaction" && pool.Servers() > poolSize) {
				t.Fatalf("%d exports at once: %d PostgreSQL backends, PgBouncer %+v; want %d backends", exports, backends, pool, tc.servers)
			}
			figures := fmt.Sprintf("%d exports at once, %s: %d PostgreSQL backends", exports, tc.route, backends)
			if b != nil {
				figures += fmt.Sprintf("; PgBouncer (default_pool_size %s): %d server connections linked, %d clients waiting",
					setting(t, b, "default_pool_size"), pool.SvActive, pool.ClWaiting)
			}
			t.Log(figures)

			if err := lock.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			for range exports {
				if err := <-errs; err != nil {
					t.Fatalf("an export after the lock was released: %v", err)
				}
			}
			for _, a := range agents {
				a.accept()
			}
			if got := count(t, admin, `SELECT count(*) FROM kollect.rows WHERE attributes->>'image' = 'registry.example/app:2'`); got != exports*3 {
				t.Fatalf("%d rows hold the second export's content, want %d", got, exports*3)
			}
			if b == nil {
				return
			}
			stats, err := b.Stats(ctx, db)
			if err != nil {
				t.Fatal(err)
			}
			if pool, err = b.Pool(ctx, db, "postgres"); err != nil {
				t.Fatal(err)
			}
			// Two exports per inventory, each a transaction (and the first's migration).
			if stats.XactCount < 2*exports || (tc.route == "transaction" && pool.Servers() > poolSize) {
				t.Fatalf("after the exports PgBouncer says %+v, %+v: want at least %d transactions through it, at most %d server connections",
					stats, pool, 2*exports, poolSize)
			}
			t.Logf("through PgBouncer: %d transactions, %d statements; %d server connections left", stats.XactCount, stats.QueryCount, pool.Servers())
		})
	}
}

func setting(t *testing.T, b *testenv.PgBouncer, key string) string {
	t.Helper()
	v, err := b.Setting(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// waitUntil polls cond until it holds, failing the test after 30 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30 s for %s", what)
		}
	}
}
