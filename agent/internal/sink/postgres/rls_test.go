package postgres

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
)

// urlAs is the URL of database db for user (the test server trusts every local user).
func urlAs(db, user string) string {
	u := strings.Replace(server.URL, "/postgres?", "/"+db+"?", 1)
	return strings.Replace(u, "://postgres@", "://"+user+"@", 1)
}

// connectAs opens a pool on db as user.
func connectAs(tb testing.TB, db, user string) *pgxpool.Pool {
	tb.Helper()
	pool, err := pgxpool.New(context.Background(), urlAs(db, user))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// rlsAdmin creates (once per server) the administrator role the sink's tables belong to: no
// superuser, so row-level security is what an ordinary deployment gets; CREATEROLE for the
// agents' roles and CREATE on db for the schema. It returns a pool on db as that role.
func rlsAdmin(tb testing.TB, db, admin string) *pgxpool.Pool {
	tb.Helper()
	ctx := context.Background()
	super := connect(tb, db)
	for _, stmt := range []string{
		`DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '` + admin + `') THEN CREATE ROLE ` + admin + ` LOGIN CREATEROLE; END IF; END $$`,
		`GRANT CREATE ON DATABASE "` + db + `" TO ` + admin,
	} {
		if _, err := super.Exec(ctx, stmt); err != nil {
			tb.Fatalf("%s: %v", stmt, err)
		}
	}
	return connectAs(tb, db, admin)
}

// applyDocumented applies the row-level security of cluster and role through the command
// docs/sinks/postgres.md shows: the script of the documented flags (the cluster and the role
// swapped for these) piped into the documented psql command as the administrator.
func applyDocumented(t *testing.T, db, admin, cluster, role string) {
	t.Helper()
	line := sinktest.DocCommand(t, "postgres.md", "kollect sinks postgres-rls")
	gen, psql, ok := strings.Cut(line, " | ")
	args, found := strings.CutPrefix(gen, "kollect sinks postgres-rls ")
	if !ok || !found || !strings.HasPrefix(psql, "psql ") {
		t.Fatalf("the documented command is not `kollect sinks postgres-rls … | psql …`: %s", line)
	}
	// The command's defaults (TestPostgresRLSPrintsTheSinkScript, agent/internal/cli, checks the
	// command prints RowSecuritySQL's script), then the documented flags.
	rs := RowSecurity{Schema: "kollect", Table: "rows", Reader: "fleet_reader"}
	fields := strings.Fields(args)
	for i := 0; i+1 < len(fields); i += 2 {
		v := fields[i+1]
		switch fields[i] {
		case "--cluster":
			rs.Cluster = v
		case "--role":
			rs.Role = v
		case "--reader":
			rs.Reader = v
		case "--schema":
			rs.Schema = v
		case "--table":
			rs.Table = v
		default:
			t.Fatalf("the documented command has flag %s, which this test does not know: %s", fields[i], line)
		}
	}
	if rs.Cluster != "east" || rs.Role != "kollect_east" || rs.Reader != "fleet_reader" {
		t.Fatalf("the documented command secures %+v, want cluster east, role kollect_east, reader fleet_reader", rs)
	}
	rs.Cluster, rs.Role = cluster, role
	script, err := RowSecuritySQL(rs)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rls.sql"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	sinktest.Shell(t, dir, []string{"ADMIN_URL=" + urlAs(db, admin)}, "cat rls.sql | "+psql)
}

// rlsSink builds a history-keeping sink of cluster that logs in as user, with a statement
// recorder.
func rlsSink(tb testing.TB, db, cluster, user string) (*Sink, *recorder) {
	tb.Helper()
	sp := spec(db)
	sp.History = true
	env := sink.Env{Cluster: cluster, Namespace: "kollect", Name: "pg", Secrets: secrets(user), Log: logr.Discard()}
	rec := &recorder{}
	s, err := open(context.Background(), sp, env, withTracer(rec))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s, rec
}

// exportAs runs what an agent does: the connection test, a first load, a diff that changes and deletes rows and
// changes the coverage, a confirmation and a read of its holdings. None may fail.
func exportAs(t *testing.T, s *Sink, cluster string) {
	t.Helper()
	ctx := context.Background()
	if err := s.Probe(ctx); err != nil {
		t.Fatalf("connection test of %s: %v", cluster, err)
	}
	a := &agent{sink: s, cluster: cluster, inventory: "apps", writer: export.Writer{Version: "v1", Instance: cluster + "@1"},
		coverage: []export.Coverage{sinktest.Complete("deployments", 6)}}
	if err := a.export(ctx, sinktest.Deployments(cluster, "apps", 6, 1)); err != nil {
		t.Fatalf("first export of %s: %v", cluster, err)
	}
	a.coverage = []export.Coverage{sinktest.Complete("deployments", 4)}
	if err := a.export(ctx, sinktest.Deployments(cluster, "apps", 4, 2)); err != nil {
		t.Fatalf("diff export of %s: %v", cluster, err)
	}
	c := sink.Confirmation{Cluster: cluster, Inventory: "apps", Checksum: a.lastChecksum, At: time.Now(), Writer: a.writer}
	if err := s.Confirm(ctx, c); err != nil {
		t.Fatalf("confirmation of %s: %v", cluster, err)
	}
	held, err := s.Holdings(ctx, cluster, "")
	if err != nil || len(held) != 1 || held[0].Rows != 4 || held[0].StateRecords != 1 || held[0].CoverageEntries != 1 || held[0].Objects == 0 {
		t.Fatalf("holdings of %s: %+v, %v", cluster, held, err)
	}
}

// rlsTables are the sink's tables with a cluster column, unquoted.
var rlsTables = []string{"rows", "rows_state", "rows_coverage", "rows_history"}

// snapshot is every row of cluster in the cluster tables as q reads them, with each row's
// xmin: a rewrite, even to the same values, changes it.
func snapshot(t *testing.T, q *pgxpool.Pool, cluster string) string {
	t.Helper()
	var sb strings.Builder
	for _, table := range rlsTables {
		var n int
		var rows string
		err := q.QueryRow(context.Background(), `SELECT count(*), coalesce(string_agg(t.xmin::text || ' ' || t::text, E'\n' ORDER BY t::text), '')
  FROM kollect.`+table+` t WHERE t.cluster = $1`, cluster).Scan(&n, &rows)
		if err != nil {
			t.Fatalf("reading %s: %v", table, err)
		}
		if n == 0 {
			t.Fatalf("the reader sees no row of %s in %s", cluster, table)
		}
		sb.WriteString(table + ":\n" + rows + "\n")
	}
	return sb.String()
}

// attack is one statement a cluster's role tries on another cluster's rows: refused is whether
// PostgreSQL must refuse it; otherwise it must change no row.
type attack struct {
	sql     string
	refused bool
}

// attacksOn are east's attempts on west's rows and on the security itself.
var attacksOn = []attack{
	{`INSERT INTO kollect.rows (cluster, inventory, target, api_group, version, kind, namespace, name, uid, attributes)
VALUES ('west', 'apps', 'deployments', 'apps', 'v1', 'Deployment', 'ns-0', 'evil', 'west-evil', '{}')`, true},
	{`INSERT INTO kollect.rows (cluster, inventory, target, api_group, version, kind, namespace, name, uid, attributes)
VALUES ('west', 'apps', 'deployments', 'apps', 'v1', 'Deployment', 'ns-0', 'app-00000', 'west-uid-00000', '{}')
ON CONFLICT (cluster, inventory, target, uid) DO UPDATE SET attributes = EXCLUDED.attributes`, true},
	{`INSERT INTO kollect.rows_state (cluster, inventory, checksum, item_count, exported_at, confirmed_at)
VALUES ('west', 'evil', 'x', 0, now(), now())`, true},
	{`INSERT INTO kollect.rows_coverage (cluster, inventory, target, state, rows, extraction_errors)
VALUES ('west', 'evil', 'deployments', 'complete', 0, 0)`, true},
	{`INSERT INTO kollect.rows_history (cluster, inventory, target, api_group, version, kind, namespace, name, uid, profile,
    profile_generation, attributes, valid_from) VALUES ('west', 'apps', 'deployments', 'apps', 'v1', 'Deployment', 'ns-0', 'evil', 'west-evil', '', 0, '{}', now())`, true},
	{`UPDATE kollect.rows SET cluster = 'west' WHERE cluster = 'east'`, true}, // moving its own rows into west
	{`UPDATE kollect.rows SET attributes = '{}' WHERE cluster = 'west'`, false},
	{`UPDATE kollect.rows_state SET checksum = 'x', contender_instance = 'east' WHERE cluster = 'west'`, false},
	{`UPDATE kollect.rows_coverage SET state = 'failed' WHERE cluster = 'west'`, false},
	{`UPDATE kollect.rows_history SET valid_to = now() WHERE cluster = 'west'`, false},
	{`DELETE FROM kollect.rows WHERE cluster = 'west'`, false},
	{`DELETE FROM kollect.rows_state WHERE cluster <> 'east'`, false},
	{`DELETE FROM kollect.rows_coverage WHERE cluster = 'west'`, false},
	{`DELETE FROM kollect.rows_history WHERE cluster = 'west'`, false},
	{`TRUNCATE kollect.rows`, true}, // row-level security does not filter TRUNCATE: no grant
	{`UPDATE kollect.cluster_roles SET cluster = 'west'`, true},
	{`INSERT INTO kollect.cluster_roles (role, cluster) VALUES ('kollect_east2', 'west')`, true},
	{`ALTER TABLE kollect.rows DISABLE ROW LEVEL SECURITY`, true},
	{`DROP POLICY kollect_own_cluster ON kollect.rows`, true},
	{`SELECT count(*) FROM kollect.rows_latest`, true}, // a view reads as its owner: no grant
}

// attackAs runs the attacks as the pool's role and returns what got through.
func attackAs(ctx context.Context, q *pgxpool.Pool, attacks []attack) []string {
	var breaches []string
	for _, a := range attacks {
		tag, err := q.Exec(ctx, a.sql)
		switch {
		case a.refused && err == nil:
			breaches = append(breaches, "not refused: "+a.sql)
		case !a.refused && err != nil:
			breaches = append(breaches, "failed ("+err.Error()+"), want 0 rows: "+a.sql)
		case !a.refused && tag.RowsAffected() != 0:
			breaches = append(breaches, tag.String()+": "+a.sql)
		}
	}
	// COPY, which the sink's first load uses where row-level security does not apply.
	_, err := q.CopyFrom(ctx, pgx.Identifier{"kollect", "rows"}, []string{"cluster", "inventory", "target", "api_group", "version", "kind",
		"namespace", "name", "uid", "attributes"}, pgx.CopyFromRows([][]any{{"west", "apps", "deployments", "apps", "v1", "Deployment", "ns-0",
		"evil-copy", "west-evil-copy", "{}"}}))
	if err == nil {
		breaches = append(breaches, "not refused: COPY kollect.rows FROM STDIN")
	}
	// Reads: nothing of west.
	var n int
	if err := q.QueryRow(ctx, `SELECT (SELECT count(*) FROM kollect.rows WHERE cluster <> 'east') + (SELECT count(*) FROM kollect.rows_state WHERE cluster <> 'east')
     + (SELECT count(*) FROM kollect.rows_coverage WHERE cluster <> 'east') + (SELECT count(*) FROM kollect.rows_history WHERE cluster <> 'east')
     + (SELECT count(*) FROM kollect.cluster_roles WHERE role <> current_user)`).Scan(&n); err != nil || n != 0 {
		breaches = append(breaches, "east reads other clusters' rows or roles: "+strings.TrimSpace(errString(err)))
	}
	return breaches
}

func errString(err error) string {
	if err == nil {
		return "(no error)"
	}
	return err.Error()
}

// TestRLSOneWriterPerCluster: with the documented row-level security, east's and west's agents
// export, confirm and read their holdings as their own roles; east's credentials can then
// neither export as west (a terminal error naming the cause) nor change any of west's rows with
// raw SQL, which the reader role sees byte for byte (and xmin for xmin) as before. Last, with
// the policies' table opened up again, the same attacks get through: the test can fail.
func TestRLSOneWriterPerCluster(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	const admin = "kollect_admin"
	adminPool := rlsAdmin(t, db, admin)
	if _, err := migrate(ctx, adminPool, names{schema: "kollect", table: "rows"}); err != nil {
		t.Fatalf("migrating as the administrator: %v", err)
	}
	applyDocumented(t, db, admin, "east", "kollect_east")
	applyDocumented(t, db, admin, "west", "kollect_west")
	applyDocumented(t, db, admin, "east", "kollect_east") // idempotent
	if _, err := adminPool.Exec(ctx, `DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'fleet_dashboard') THEN
  CREATE ROLE fleet_dashboard LOGIN IN ROLE fleet_reader; END IF; END $$`); err != nil {
		t.Fatal(err)
	}

	east, eastRec := rlsSink(t, db, "east", "kollect_east")
	west, _ := rlsSink(t, db, "west", "kollect_west")
	exportAs(t, east, "east")
	exportAs(t, west, "west")
	for _, stmt := range writes(eastRec.take()) {
		if !strings.HasPrefix(stmt, "CREATE TEMP TABLE") && (strings.HasPrefix(stmt, "CREATE") || strings.HasPrefix(stmt, "ALTER")) {
			t.Errorf("east's agent ran DDL on a current schema: %s", stmt)
		}
	}

	reader := connectAs(t, db, "fleet_dashboard")
	snapshot(t, reader, "east") // the reader sees every cluster
	before := snapshot(t, reader, "west")

	// The sink of cluster west with east's credentials.
	wrong, _ := rlsSink(t, db, "west", "kollect_east")
	impostor := &agent{sink: wrong, cluster: "west", inventory: "apps", writer: export.Writer{Version: "v1", Instance: "east@1"}}
	for _, rows := range [][]export.Row{sinktest.Deployments("west", "apps", 4, 9), nil} {
		err := impostor.export(ctx, rows)
		if err == nil {
			t.Fatalf("east's credentials exported %d rows of west", len(rows))
		}
		if sink.ClassOf(err) != sink.Terminal || !strings.Contains(err.Error(), "user kollect_east may not write the rows of cluster west") ||
			!strings.Contains(err.Error(), "row-level security policy") {
			t.Fatalf("export as west with east's credentials: %v (class %v), want a terminal error naming the user, the cluster and row-level security",
				err, sink.ClassOf(err))
		}
	}
	if err := wrong.Confirm(ctx, sink.Confirmation{Cluster: "west", Inventory: "apps", Checksum: "x", At: time.Now()}); !errors.Is(err, sink.ErrNotHeld) {
		t.Fatalf("confirmation as west with east's credentials: %v, want ErrNotHeld (west's state is invisible)", err)
	}
	if removed, err := wrong.Purge(ctx, "west", "", time.Time{}); err != nil || len(removed) != 0 {
		t.Fatalf("purge of west with east's credentials removed %+v, %v", removed, err)
	}

	eastSQL := connectAs(t, db, "kollect_east")
	if breaches := attackAs(ctx, eastSQL, attacksOn); len(breaches) > 0 {
		t.Errorf("east's role got through:\n%s", strings.Join(breaches, "\n"))
	}
	if after := snapshot(t, reader, "west"); after != before {
		t.Fatalf("west's rows changed under east's credentials:\n--- before\n%s--- after\n%s", before, after)
	}
	// East still works after all that.
	exportAs(t, east, "east")

	// The control: without the policies' protection on the rows table, the same probes see
	// breaches, so a script that secured nothing would fail this test.
	if _, err := adminPool.Exec(ctx, `ALTER TABLE kollect.rows DISABLE ROW LEVEL SECURITY`); err != nil {
		t.Fatal(err)
	}
	breaches := attackAs(ctx, eastSQL, attacksOn)
	if len(breaches) == 0 {
		t.Fatal("with row-level security off on kollect.rows, east's role still got nowhere: the probes prove nothing")
	}
	if after := snapshot(t, reader, "west"); after == before {
		t.Fatal("with row-level security off on kollect.rows, west's rows did not change: the comparison proves nothing")
	}
}

// TestRLSScriptCreatesTheSchema: on an empty database the script applies the migrations itself,
// as the administrator, so an agent role that may create nothing finds its schema current; the
// policies cover every table with a cluster column the migrations create (a new migration's
// table fails here until the script secures it); and the script refuses to map a role that
// owns the tables, which row-level security would not bind.
func TestRLSScriptCreatesTheSchema(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	const admin = "kollect_fresh_admin"
	adminPool := rlsAdmin(t, db, admin)
	script, err := RowSecuritySQL(RowSecurity{Schema: "kollect", Table: "rows", Cluster: "east", Role: "kollect_fresh_east", Reader: "fleet_reader"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rls.sql"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	sinktest.Shell(t, dir, []string{"ADMIN_URL=" + urlAs(db, admin)}, `psql "$ADMIN_URL" -v ON_ERROR_STOP=1 -q -f rls.sql`)

	n := names{schema: "kollect", table: "rows"}
	all, err := migrations(n)
	if err != nil {
		t.Fatal(err)
	}
	done, err := appliedVersions(ctx, adminPool, n)
	if err != nil || !current(done, all) {
		t.Fatalf("after the script the ledger holds %v (%v), want every migration", done, err)
	}
	s, rec := rlsSink(t, db, "east", "kollect_fresh_east")
	exportAs(t, s, "east")
	for _, stmt := range writes(rec.take()) {
		if strings.HasPrefix(stmt, "CREATE SCHEMA") || strings.HasPrefix(stmt, "CREATE TABLE IF NOT EXISTS") {
			t.Errorf("the agent ran its migrations: %s", stmt)
		}
	}

	// Every table with a cluster column is secured, and the schema has no other table than the
	// ledger and the mapping.
	rows, err := adminPool.Query(ctx, `SELECT c.relname,
       EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'cluster' AND NOT a.attisdropped),
       c.relrowsecurity,
       (SELECT count(*) FROM pg_policy p WHERE p.polrelid = c.oid)
  FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
 WHERE s.nspname = 'kollect' AND c.relkind IN ('r', 'p') ORDER BY c.relname`)
	if err != nil {
		t.Fatal(err)
	}
	var clustered, others []string
	for rows.Next() {
		var name string
		var hasCluster, secured bool
		var policies int
		if err := rows.Scan(&name, &hasCluster, &secured, &policies); err != nil {
			t.Fatal(err)
		}
		switch {
		case name == "cluster_roles": // the mapping: each role reads its own row, the reader all
			others = append(others, name)
			if !secured || policies != 2 {
				t.Errorf("cluster_roles has row-level security %v and %d policies, want on and 2", secured, policies)
			}
		case hasCluster:
			clustered = append(clustered, name)
			if !secured || policies != 2 {
				t.Errorf("table %s has a cluster column, row-level security %v and %d policies, want on and 2", name, secured, policies)
			}
		default:
			others = append(others, name)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(rlsTables)
	slices.Sort(want)
	if !slices.Equal(clustered, want) || !slices.Equal(others, []string{"cluster_roles", "schema_migrations"}) {
		t.Fatalf("tables with a cluster column %v and without %v, want %v and [cluster_roles schema_migrations]", clustered, others, want)
	}
	// The administrator itself owns the tables: mapping it to a cluster is refused, and nothing
	// of the script stays.
	owner, err := RowSecuritySQL(RowSecurity{Schema: "kollect", Table: "rows", Cluster: "west", Role: admin})
	if err != nil {
		t.Fatal(err)
	}
	_, err = adminPool.Exec(ctx, owner)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || !strings.Contains(pgErr.Message, "owns the schema or a table of the sink") {
		t.Fatalf("mapping the tables' owner to a cluster: %v, want the script's refusal", err)
	}
	if got := count(t, adminPool, `SELECT count(*) FROM kollect.cluster_roles WHERE role = $1`, admin); got != 0 {
		t.Fatalf("the refused script left %d mapping rows", got)
	}
}

// TestRLSScriptRefusesBadNames: no script for names that cannot be a role or would read as
// something else.
func TestRLSScriptRefusesBadNames(t *testing.T) {
	ok := RowSecurity{Schema: "kollect", Table: "rows", Cluster: "east", Role: "kollect_east", Reader: "fleet_reader"}
	if _, err := RowSecuritySQL(ok); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*RowSecurity){
		"no cluster":          func(r *RowSecurity) { r.Cluster = "" },
		"no role":             func(r *RowSecurity) { r.Role = "" },
		"role is the reader":  func(r *RowSecurity) { r.Reader = r.Role },
		"reserved role":       func(r *RowSecurity) { r.Role = "pg_write_all_data" },
		"public":              func(r *RowSecurity) { r.Role = "PUBLIC" },
		"long role":           func(r *RowSecurity) { r.Role = strings.Repeat("r", 64) },
		"dollar quote":        func(r *RowSecurity) { r.Role = "a$kollect$b" },
		"newline":             func(r *RowSecurity) { r.Cluster = "east\nDROP TABLE kollect.rows;" },
		"NUL":                 func(r *RowSecurity) { r.Cluster = "a\x00b" },
		"long table":          func(r *RowSecurity) { r.Table = strings.Repeat("t", 60) },
		"dollar in migration": func(r *RowSecurity) { r.Table = "t$kollect_migration$" },
	} {
		rs := ok
		mutate(&rs)
		if _, err := RowSecuritySQL(rs); err == nil {
			t.Errorf("%s: a script for %+v", name, rs)
		}
	}
	// Quotes in names are quoted, not code.
	rs := ok
	rs.Cluster, rs.Role = "o'brien", `evil"role`
	script, err := RowSecuritySQL(rs)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(script, `VALUES ('evil"role', 'o''brien')`) || !strings.Contains(script, `TO "evil""role";`) {
		t.Fatalf("quotes in names are not quoted:\n%s", script)
	}
}
