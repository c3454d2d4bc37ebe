package postgres

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5/pgxpool"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
	v1alpha1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

var sqlBlock = regexp.MustCompile("(?s)```sql\n(.*?)```")

// docSetups returns the SQL blocks of docs/sinks/postgres.md's "Privileges and connection test"
// section: the minimal setup (the schema created for the agent) and its alternative (CREATE on
// the database).
func docSetups(t *testing.T) (minimal, alternative string) {
	t.Helper()
	page := string(sinktest.DocFile(t, "sinks/postgres.md"))
	_, section, ok := strings.Cut(page, "\n## Privileges and connection test\n")
	if !ok {
		t.Fatal(`docs/sinks/postgres.md has no section "Privileges and connection test"`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	blocks := sqlBlock.FindAllStringSubmatch(section, -1)
	if len(blocks) != 2 {
		t.Fatalf("docs/sinks/postgres.md, Privileges and connection test: %d sql blocks, want the minimal setup and its alternative", len(blocks))
	}
	minimal, alternative = blocks[0][1], blocks[1][1]
	if !strings.Contains(minimal, "CREATE SCHEMA kollect AUTHORIZATION kollect_agent") || !strings.Contains(alternative, "GRANT CREATE ON DATABASE inventory") {
		t.Fatalf("the documented setups are not the ones this test knows:\n%s\n%s", minimal, alternative)
	}
	return minimal, alternative
}

// TestDocumentedMinimalSetup runs each documented setup verbatim with psql as a superuser in a
// fresh database named as in the docs, then exports as kollect_agent through the real sink
// (a first load, a diff, a delete) and reads the rows back as fleet_reader. The minimal setup
// gives the agent a schema and nothing on the database: a migration that ran CREATE SCHEMA
// (even IF NOT EXISTS) failed every export with "permission denied for database" while the
// connection test passed.
//
// The server is its own: roles belong to the whole cluster, the setups create kollect_agent and
// fleet_reader as written, and other tests of the package create a fleet_reader of their own.
func TestDocumentedMinimalSetup(t *testing.T) {
	minimal, alternative := docSetups(t)
	pg, err := testenv.StartPostgres()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Stop)
	for _, tc := range []struct {
		name, sql string
		// createsSchema: the agent's first export creates the schema.
		createsSchema bool
	}{{"schema created for the agent", minimal, false}, {"create on the database", alternative, true}} {
		t.Run(tc.name, func(t *testing.T) {
			runDocSetup(t, pg, tc.sql, tc.createsSchema)
		})
	}
}

func runDocSetup(t *testing.T, pg *testenv.Postgres, setup string, createsSchema bool) {
	ctx := t.Context()
	url, err := pg.CreateDatabase(ctx, "inventory")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		admin.Close()
		// The next setup creates the same roles in a database of the same name.
		if out, err := exec.Command("psql", pg.URL, "-v", "ON_ERROR_STOP=1", "-qc",
			"DROP DATABASE inventory WITH (FORCE)", "-c", "DROP ROLE kollect_agent, fleet_reader").CombinedOutput(); err != nil {
			t.Errorf("cleaning up: %v: %s", err, out)
		}
	})
	file := filepath.Join(t.TempDir(), "setup.sql")
	if err := os.WriteFile(file, []byte(setup), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, "psql", url, "-v", "ON_ERROR_STOP=1", "-q", "-f", file).CombinedOutput(); err != nil {
		t.Fatalf("the documented setup failed: %v: %s", err, out)
	}

	sp := &v1alpha1.PostgresSinkConfig{Host: "127.0.0.1", Port: int32(pg.Port), Database: "inventory", SSLMode: "disable",
		SecretRef: v1alpha1.SecretReference{Name: "pg"}}
	env := sink.Env{Cluster: "east", Namespace: "kollect", Name: "pg", Log: logr.Discard(),
		Secrets: func(context.Context, string) (map[string][]byte, error) {
			return map[string][]byte{"username": []byte("kollect_agent"), "password": []byte("change-me")}, nil
		}}
	rec := &recorder{}
	s, err := open(ctx, sp, env, withTracer(rec))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		forgetSchema(s.dest) // the next setup's database has the same destination
	})
	if err := s.Probe(ctx); err != nil {
		t.Fatalf("the connection test fails after the documented setup: %v", err)
	}

	a := &agent{sink: s, cluster: "east", inventory: "apps"}
	first := sinktest.Deployments("east", "apps", 3, 1)
	changed := append(slices.Clone(first), sinktest.Deployment("east", "apps", 3, map[string]any{"replicas": 9}))
	changed[1] = sinktest.Deployment("east", "apps", 1, map[string]any{"replicas": 7})
	deleted := changed[1:]
	for i, rows := range [][]export.Row{first, changed, deleted} {
		if err := a.export(ctx, rows); err != nil {
			t.Fatalf("export %d of 3 (a first load, a diff, a delete) as kollect_agent: %v", i+1, err)
		}
	}
	var created []string
	for _, stmt := range writes(rec.take()) {
		if strings.HasPrefix(stmt, "CREATE SCHEMA") {
			created = append(created, stmt)
		}
	}
	if createsSchema != (len(created) == 1) {
		t.Errorf("the agent ran %q; want the schema created by the agent: %v", created, createsSchema)
	}

	// fleet_reader reads the rows and a view. It cannot log in: the superuser becomes it.
	conn, err := admin.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET ROLE fleet_reader"); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.Background(), "RESET ROLE")
	want := map[string]string{}
	for _, r := range deleted {
		want[r.UID] = string(r.Attributes)
	}
	rows, err := conn.Query(ctx, "SELECT uid, attributes::text FROM kollect.rows WHERE cluster = 'east' AND inventory = 'apps'")
	if err != nil {
		t.Fatalf("fleet_reader reading kollect.rows: %v", err)
	}
	got := map[string]string{}
	for rows.Next() {
		var uid, attrs string
		if err := rows.Scan(&uid, &attrs); err != nil {
			t.Fatal(err)
		}
		got[uid] = attrs
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("fleet_reader reading kollect.rows: %v", err)
	}
	if len(got) != len(want) {
		t.Fatalf("fleet_reader reads %d rows %v, want %d: %v", len(got), got, len(want), want)
	}
	for uid, attrs := range want {
		if !jsonEqual(t, got[uid], attrs) {
			t.Errorf("row %s reads %s, want %s", uid, got[uid], attrs)
		}
	}
	var latest int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM kollect.rows_latest WHERE cluster = 'east'").Scan(&latest); err != nil || latest != len(want) {
		t.Fatalf("fleet_reader reading kollect.rows_latest: %d rows, %v; want %d", latest, err, len(want))
	}
}

// jsonEqual compares two JSON documents by value: jsonb's text has its own spacing and key order.
func jsonEqual(t *testing.T, a, b string) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal([]byte(a), &va); err != nil {
		return false
	}
	if err := json.Unmarshal([]byte(b), &vb); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(va, vb)
}
