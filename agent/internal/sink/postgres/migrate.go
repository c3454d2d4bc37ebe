package postgres

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"github.com/jackc/pgx/v5"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migration is one versioned step of the schema, rendered for a schema and table.
type migration struct {
	version int
	name    string
	sql     string
}

// maxIdentifier is PostgreSQL's NAMEDATALEN-1: longer names are silently truncated, which
// would make two derived names collide or differ from the documented ones.
const maxIdentifier = 63

// names are the quoted identifiers of one sink's objects.
type names struct {
	schema, table string
}

func (n names) ident(obj string) string { return pgx.Identifier{n.schema, obj}.Sanitize() }

// Rows is the rows table, State the state table, Coverage the coverage table, Migrations the
// migrations ledger.
func (n names) Rows() string       { return n.ident(n.table) }
func (n names) State() string      { return n.ident(n.table + "_state") }
func (n names) Coverage() string   { return n.ident(n.table + "_coverage") }
func (n names) Migrations() string { return n.ident("schema_migrations") }
func (n names) History() string    { return n.ident(n.table + "_history") }
func (n names) Schema() string     { return pgx.Identifier{n.schema}.Sanitize() }

// View, Function and Index derive object names from the table name.
func (n names) View(suffix string) string     { return n.ident(n.table + "_" + suffix) }
func (n names) Function(suffix string) string { return n.View(suffix) }
func (n names) Index(suffix string) string {
	return pgx.Identifier{n.table + "_" + suffix + "_idx"}.Sanitize()
}

// derived lists every unquoted name the migrations create, for the length check. No suffix
// may be longer than "_image_usage": the documented limit of 51 characters for a table name
// holds since the first release.
func (n names) derived() []string {
	var out []string
	for _, s := range []string{"", "_state", "_latest", "_counts", "_images", "_image_usage", "_kind_idx", "_coverage", "_covered",
		"_history", "_history_idx", "_hopen_idx", "_as_of"} {
		out = append(out, n.table+s)
	}
	return out
}

func (n names) validate() error {
	for _, d := range append(n.derived(), n.schema) {
		if len(d) > maxIdentifier {
			return fmt.Errorf("name %q is longer than PostgreSQL's %d bytes: choose a table name of at most %d characters",
				d, maxIdentifier, maxIdentifier-len("_image_usage"))
		}
	}
	return nil
}

// migrations renders the embedded migrations for n, ordered by version.
func migrations(n names) ([]migration, error) {
	entries, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(entries)
	out := make([]migration, 0, len(entries))
	for _, e := range entries {
		base := path.Base(e)
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration %s: file name must start with a version number", base)
		}
		raw, err := migrationFiles.ReadFile(e)
		if err != nil {
			return nil, err
		}
		tmpl, err := template.New(base).Option("missingkey=error").Parse(string(raw))
		if err != nil {
			return nil, fmt.Errorf("migration %s: %w", base, err)
		}
		var sb strings.Builder
		if err := tmpl.Execute(&sb, n); err != nil {
			return nil, fmt.Errorf("migration %s: %w", base, err)
		}
		out = append(out, migration{version: v, name: strings.TrimSuffix(base, ".sql"), sql: sb.String()})
	}
	return out, nil
}

// migrationLockKey serialises migrations of every Kollect sink in one database: creating the
// schema and the ledger themselves must not race.
const migrationLockKey = "kollect.dev/postgres-sink/migrate"

// createSchemaSQL creates the schema. It runs only when the schema is missing (see
// schemaExists): PostgreSQL checks CREATE on the database before it looks whether the schema
// exists, so even CREATE SCHEMA IF NOT EXISTS fails ("permission denied for database") for a
// role that owns a schema an administrator created for it, the documented minimal setup.
func createSchemaSQL(n names) string { return "CREATE SCHEMA IF NOT EXISTS " + n.Schema() }

// ledgerSQL creates the ledger, keyed by table so several sinks (different tables) can share
// one schema. It needs CREATE on the schema only.
func ledgerSQL(n names) string {
	return "CREATE TABLE IF NOT EXISTS " + n.Migrations() + ` (
    table_name text        NOT NULL,
    version    integer     NOT NULL,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (table_name, version)
)`
}

// schemaExists reads the catalog (not to_regnamespace, for the reason appliedVersions gives).
func schemaExists(ctx context.Context, q queryer, n names) (bool, error) {
	var exists bool
	if err := q.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)", n.schema).Scan(&exists); err != nil {
		return false, fmt.Errorf("looking for schema %s: %w", n.schema, err)
	}
	return exists, nil
}

// migrate applies the pending migrations in one transaction under an advisory lock, so two
// agents starting at once apply each step exactly once and nobody sees a half-built schema.
// A read-only check comes first, so a sink starting against a current schema runs no DDL at
// all (not even IF NOT EXISTS), which keeps restarts write-free.
func migrate(ctx context.Context, db database, n names) (applied int, err error) {
	all, err := migrations(n)
	if err != nil {
		return 0, err
	}
	if done, err := appliedVersions(ctx, db, n); err == nil && current(done, all) {
		return 0, nil
	}
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", migrationLockKey); err != nil {
			return fmt.Errorf("taking the migration lock: %w", err)
		}
		// Read under the lock, before any DDL: sinks that waited while another applied the
		// migrations (every tenant's sink of a fresh database at once) find them applied
		// (appliedVersions sees what committed during the wait). The bootstrap below creates at
		// most an empty ledger, so what is read here stays true.
		done, err := appliedVersions(ctx, tx, n)
		if err != nil {
			return err
		}
		if current(done, all) {
			return nil
		}
		exists, err := schemaExists(ctx, tx, n)
		if err != nil {
			return err
		}
		if !exists {
			if _, err := tx.Exec(ctx, createSchemaSQL(n)); err != nil {
				return fmt.Errorf("creating schema %s: %w", n.schema, err)
			}
		}
		if _, err := tx.Exec(ctx, ledgerSQL(n)); err != nil {
			return fmt.Errorf("creating the migration ledger in schema %s: %w", n.schema, err)
		}
		for _, m := range all {
			if done[m.version] {
				continue
			}
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return fmt.Errorf("migration %s: %w", m.name, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO "+n.Migrations()+" (table_name, version, name) VALUES ($1, $2, $3)",
				n.table, m.version, m.name); err != nil {
				return fmt.Errorf("recording migration %s: %w", m.name, err)
			}
			applied++
		}
		return nil
	})
	return applied, err
}

// current reports whether every migration is in the ledger's done versions.
func current(done map[int]bool, all []migration) bool {
	for _, m := range all {
		if !done[m.version] {
			return false
		}
	}
	return true
}

// queryer is what read-only helpers need: a pool, a connection or a transaction.
type queryer interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// database can also start transactions.
type database interface {
	queryer
	Begin(ctx context.Context) (pgx.Tx, error)
}

// appliedVersions reads the ledger; a missing ledger means nothing is applied.
func appliedVersions(ctx context.Context, q queryer, n names) (map[int]bool, error) {
	// pg_tables rather than to_regclass: a scan of the catalog sees what committed before the
	// statement, where to_regclass may answer from this session's catalog cache, which a
	// session that waited for the migration lock has not refreshed since the wait began.
	var exists bool
	if err := q.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = $1 AND tablename = 'schema_migrations')",
		n.schema).Scan(&exists); err != nil {
		return nil, fmt.Errorf("looking for the migration ledger: %w", err)
	}
	done := map[int]bool{}
	if !exists {
		return done, nil
	}
	rows, err := q.Query(ctx, "SELECT version FROM "+n.Migrations()+" WHERE table_name = $1", n.table)
	if err != nil {
		return nil, fmt.Errorf("reading the migration ledger: %w", err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, fmt.Errorf("reading the migration ledger: %w", err)
	}
	for _, v := range versions {
		done[v] = true
	}
	return done, nil
}

// pending returns the statements a migration would run now, for Preview: all of them when the
// database cannot be read.
func pending(ctx context.Context, q queryer, n names) ([]string, error) {
	all, err := migrations(n)
	if err != nil {
		return nil, err
	}
	done, exists := map[int]bool{}, false
	if q != nil {
		if exists, err = schemaExists(ctx, q, n); err != nil {
			return nil, err
		}
		if done, err = appliedVersions(ctx, q, n); err != nil {
			return nil, err
		}
	}
	var out []string
	if !exists {
		out = append(out, createSchemaSQL(n))
	}
	if len(done) == 0 {
		out = append(out, ledgerSQL(n))
	}
	for _, m := range all {
		if !done[m.version] {
			out = append(out, strings.TrimSpace(m.sql))
		}
	}
	return out, nil
}
