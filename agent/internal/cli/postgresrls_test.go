package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"kollect.dev/agent/internal/sink/postgres"
	"kollect.dev/testenv"
)

// TestPostgresRLSPrintsTheSinkScript: the command prints the sink package's script for its
// flags and defaults (agent/internal/sink/postgres's TestRLSOneWriterPerCluster pipes that
// script into psql as docs/sinks/postgres.md shows and attacks the result), and refuses
// incomplete or contradictory flags with a usage error.
func TestPostgresRLSPrintsTheSinkScript(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want postgres.RowSecurity
	}{
		{[]string{"--cluster", "east", "--role", "kollect_east"},
			postgres.RowSecurity{Schema: "kollect", Table: "rows", Cluster: "east", Role: "kollect_east", Reader: "fleet_reader"}},
		{[]string{"--cluster", "west", "--role", "kollect_west", "--schema", "fleet", "--table", "inventory", "--reader", ""},
			postgres.RowSecurity{Schema: "fleet", Table: "inventory", Cluster: "west", Role: "kollect_west"}},
	} {
		out, errOut, code := run(t, "", append([]string{"sinks", "postgres-rls"}, tc.args...)...)
		if code != ExitOK {
			t.Fatalf("%v: exit %d: %s", tc.args, code, errOut)
		}
		want, err := postgres.RowSecuritySQL(tc.want)
		if err != nil {
			t.Fatal(err)
		}
		if out != want {
			t.Fatalf("%v printed\n%s\nwant the script of %+v\n%s", tc.args, out, tc.want, want)
		}
	}
	for _, args := range [][]string{
		{"--role", "kollect_east"},
		{"--cluster", "east"},
		{"--cluster", "east", "--role", "kollect_east", "--apply"},
		{"--cluster", "east", "--role", "kollect_east", "--postgres", "postgres://admin@db/inventory"},
		{"--cluster", "east", "--role", "pg_monitor"},
		{"--cluster", "east", "--role", "fleet_reader"},
	} {
		out, errOut, code := run(t, "", append([]string{"sinks", "postgres-rls"}, args...)...)
		if code != ExitUsage || out != "" || errOut == "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want a usage error and no script", args, code, out, errOut)
		}
	}
}

// TestPostgresRLSApply runs the script with --apply, twice (it is idempotent), on a real
// server, and reads back the mapping and the security it set.
func TestPostgresRLSApply(t *testing.T) {
	pg, err := testenv.StartPostgres()
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Stop()
	for range 2 {
		out, errOut, code := run(t, "", "sinks", "postgres-rls", "--cluster", "east", "--role", "kollect_east", "--apply", "--postgres", pg.URL)
		if code != ExitOK {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if want := "row-level security applied: role kollect_east writes only cluster east in kollect.rows\n"; out != want {
			t.Fatalf("printed %q, want %q", out, want)
		}
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var cluster string
	var secured int
	if err := conn.QueryRow(ctx, `SELECT (SELECT cluster FROM kollect.cluster_roles WHERE role = 'kollect_east'),
       (SELECT count(*) FROM pg_class WHERE oid = ANY (ARRAY['kollect.rows', 'kollect.rows_state', 'kollect.rows_coverage', 'kollect.rows_history']::regclass[])
           AND relrowsecurity)`).Scan(&cluster, &secured); err != nil {
		t.Fatal(err)
	}
	if cluster != "east" || secured != 4 {
		t.Fatalf("kollect_east maps to %q and %d tables have row-level security, want east and 4", cluster, secured)
	}

	// A server that refuses the script: a usage error (exit 2) that says why.
	_, errOut, code := run(t, "", "sinks", "postgres-rls", "--cluster", "west", "--role", "postgres", "--apply", "--postgres", pg.URL)
	if code != ExitUsage || !strings.Contains(errOut, "superuser") {
		t.Fatalf("mapping the superuser: exit %d: %s", code, errOut)
	}
}
