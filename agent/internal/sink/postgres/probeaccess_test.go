package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
)

// currentGrants are what a role needs on a current schema (the grants kollect sinks
// postgres-rls gives, without row-level security); {role} is the role.
var currentGrants = []string{
	`GRANT USAGE ON SCHEMA kollect TO {role}`,
	`GRANT SELECT ON kollect.schema_migrations TO {role}`,
	`GRANT SELECT, INSERT, UPDATE, DELETE ON kollect.rows, kollect.rows_state, kollect.rows_coverage, kollect.rows_history TO {role}`,
}

// TestProbeNamesTheMissingPrivilege: for a role lacking each privilege an export needs in turn
// (what it needs depends on what the database holds), the connection test fails, terminal,
// naming the privilege, and an export as that role fails too: the test does not pass where the
// export cannot. The role with every privilege (the positive control) passes and exports.
func TestProbeNamesTheMissingPrivilege(t *testing.T) {
	for _, tc := range []struct {
		name string
		// migrated: the superuser applies the migrations first; setup then runs as the
		// superuser ({role} is the role, {db} the database).
		migrated bool
		setup    []string
		want     string // "" for the role that may export
	}{
		{"every privilege on a current schema", true, currentGrants, ""},
		{"no schema, no CREATE on the database", false, nil, "lacks CREATE on database"},
		{"schema without tables, no CREATE on it", false, []string{`CREATE SCHEMA kollect`, `GRANT USAGE ON SCHEMA kollect TO {role}`},
			`lacks CREATE on schema kollect`},
		{"schema without USAGE", false, []string{`CREATE SCHEMA kollect`, `GRANT CREATE ON SCHEMA kollect TO {role}`},
			`lacks USAGE on schema kollect`},
		{"no SELECT on the ledger", true, append(slices.Clone(currentGrants), `REVOKE SELECT ON kollect.schema_migrations FROM {role}`),
			`lacks SELECT on "kollect"."schema_migrations"`},
		{"no INSERT on the state", true, append(slices.Clone(currentGrants), `REVOKE INSERT ON kollect.rows_state FROM {role}`),
			`lacks INSERT on "kollect"."rows_state"`},
		{"no UPDATE, DELETE on the rows", true, append(slices.Clone(currentGrants), `REVOKE UPDATE, DELETE ON kollect.rows FROM {role}`),
			`lacks UPDATE, DELETE on "kollect"."rows"`},
		{"no TEMP on the database", true, append(slices.Clone(currentGrants), `REVOKE TEMP ON DATABASE {db} FROM PUBLIC`),
			`lacks TEMP on database`},
		{"a pending migration alters a table another role owns", true, append(slices.Clone(currentGrants),
			`GRANT CREATE ON SCHEMA kollect TO {role}`, `GRANT INSERT ON kollect.schema_migrations TO {role}`,
			`DELETE FROM kollect.schema_migrations WHERE version = 7`,
			`ALTER TABLE kollect.rows_state DROP COLUMN contender_version, DROP COLUMN contender_instance, DROP COLUMN contended_at`),
			`does not own "kollect"."rows_state", which migration 0007_contender alters`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			db := newDatabase(t)
			admin := connect(t, db)
			role := fmt.Sprintf("probe_%d", dbSeq.Add(1))
			if _, err := admin.Exec(ctx, `CREATE ROLE `+role+` LOGIN`); err != nil {
				t.Fatal(err)
			}
			if tc.migrated {
				if _, err := migrate(ctx, admin, names{schema: "kollect", table: "rows"}); err != nil {
					t.Fatal(err)
				}
			}
			for _, q := range tc.setup {
				if _, err := admin.Exec(ctx, strings.NewReplacer("{role}", role, "{db}", `"`+db+`"`).Replace(q)); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			env := testEnv("east")
			env.Secrets = secrets(role)
			s, err := open(ctx, spec(db), env)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()

			probeErr := s.Probe(ctx)
			exportErr := exportThrice(ctx, s)
			if tc.want == "" {
				if probeErr != nil || exportErr != nil {
					t.Fatalf("the role with every privilege: probe %v, export %v; want both to pass", probeErr, exportErr)
				}
				return
			}
			if probeErr == nil || sink.ClassOf(probeErr) != sink.Terminal || !strings.Contains(probeErr.Error(), tc.want) {
				t.Errorf("probe: %v (class %s); want a terminal error saying %q", probeErr, sink.ClassOf(probeErr), tc.want)
			}
			if exportErr == nil {
				t.Errorf("the export as the role succeeded, where the probe says %q", tc.want)
			}
		})
	}
}

// exportThrice exports a first load, a diff and a delete, what a new inventory's first minutes do.
func exportThrice(ctx context.Context, s *Sink) error {
	a := &agent{sink: s, cluster: "east", inventory: "apps"}
	first := sinktest.Deployments("east", "apps", 3, 1)
	for i, rows := range [][]export.Row{first, sinktest.Deployments("east", "apps", 3, 2), first[1:]} {
		if err := a.export(ctx, rows); err != nil {
			return fmt.Errorf("export %d: %w", i+1, err)
		}
	}
	return nil
}
