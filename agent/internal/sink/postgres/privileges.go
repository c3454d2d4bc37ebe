package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"kollect.dev/agent/internal/sink"
)

// access is what the connection test reads of the database, in two round trips, to decide
// whether the next export can succeed. It reads the catalog only: checking by trying (a
// CREATE in a rolled-back transaction) would take locks and write WAL at every probe.
type access struct {
	database string
	// createDB and tempDB are CREATE and TEMP on the database.
	createDB, tempDB bool
	// schema: whether it exists, and USAGE and CREATE on it.
	schemaExists, usage, createSchema bool
	// tables are the sink's tables that exist, by unquoted name.
	tables map[string]tableAccess
}

// tableAccess is one table's privileges for the current user. Each is checked on its own:
// has_table_privilege with a list answers whether any of them is held, not all.
type tableAccess struct {
	selectOK, insertOK, updateOK, deleteOK bool
	// owned: the user is (a member of) the owner, as ALTER TABLE in a migration needs.
	owned bool
}

// missing names the DML privileges of want that a lacks, in want's order.
func (a tableAccess) missing(want ...string) []string {
	held := map[string]bool{"SELECT": a.selectOK, "INSERT": a.insertOK, "UPDATE": a.updateOK, "DELETE": a.deleteOK}
	var out []string
	for _, p := range want {
		if !held[p] {
			out = append(out, p)
		}
	}
	return out
}

// readAccess reads the privileges of the current user on the database, the sink's schema and
// its tables (those that exist).
func readAccess(ctx context.Context, q queryer, n names) (*access, error) {
	a := &access{tables: map[string]tableAccess{}}
	err := q.QueryRow(ctx, `SELECT current_database(),
    has_database_privilege(current_database(), 'CREATE'),
    has_database_privilege(current_database(), 'TEMP'),
    n.oid IS NOT NULL,
    n.oid IS NOT NULL AND has_schema_privilege(n.oid, 'USAGE'),
    n.oid IS NOT NULL AND has_schema_privilege(n.oid, 'CREATE')
  FROM (SELECT) AS one LEFT JOIN pg_catalog.pg_namespace n ON n.nspname = $1`, n.schema).Scan(
		&a.database, &a.createDB, &a.tempDB, &a.schemaExists, &a.usage, &a.createSchema)
	if err != nil {
		return nil, fmt.Errorf("reading the privileges: %w", err)
	}
	if !a.schemaExists {
		return a, nil
	}
	rows, err := q.Query(ctx, `SELECT c.relname,
    has_table_privilege(c.oid, 'SELECT'), has_table_privilege(c.oid, 'INSERT'),
    has_table_privilege(c.oid, 'UPDATE'), has_table_privilege(c.oid, 'DELETE'),
    pg_has_role(c.relowner, 'USAGE')
  FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace s ON s.oid = c.relnamespace
 WHERE s.nspname = $1 AND c.relname = ANY ($2::text[]) AND c.relkind IN ('r', 'p')`, n.schema, n.tableNames())
	if err != nil {
		return nil, fmt.Errorf("reading the privileges on the tables: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var t tableAccess
		if err := rows.Scan(&name, &t.selectOK, &t.insertOK, &t.updateOK, &t.deleteOK, &t.owned); err != nil {
			return nil, fmt.Errorf("reading the privileges on the tables: %w", err)
		}
		a.tables[name] = t
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the privileges on the tables: %w", err)
	}
	return a, nil
}

// tableNames are the unquoted names of the sink's tables and the ledger.
func (n names) tableNames() []string {
	return []string{n.table, n.table + "_state", n.table + "_coverage", n.table + "_history", "schema_migrations"}
}

// checkAccess returns a terminal error naming the first privilege an export would miss, in
// the order an export needs them, or nil. pending are the migrations still to run (all when
// the ledger is missing), which an export runs first.
func (s *Sink) checkAccess(a *access, pending []migration) error {
	n, user := s.names, pgx.Identifier{s.user}.Sanitize() // user as the GRANTs the messages suggest spell it
	fail := func(format string, args ...any) error {
		return sink.Terminalf("postgres sink %s: user %s %s", s.dest, s.user, fmt.Sprintf(format, args...))
	}
	switch {
	case !a.tempDB:
		// Every export but a first load stages its rows in a temporary table.
		return fail("lacks TEMP on database %s: exports stage rows in a temporary table (GRANT TEMP ON DATABASE %s TO %s)",
			a.database, pgx.Identifier{a.database}.Sanitize(), user)
	case !a.schemaExists && !a.createDB:
		return fail("lacks CREATE on database %s: schema %s does not exist and the first export creates it "+
			"(GRANT CREATE ON DATABASE %s TO %s, or create the schema for the user: CREATE SCHEMA %s AUTHORIZATION %s)",
			a.database, n.schema, pgx.Identifier{a.database}.Sanitize(), user, n.Schema(), user)
	case !a.schemaExists:
		return nil // the export creates the schema, which the user then owns
	case !a.usage:
		return fail("lacks USAGE on schema %s (GRANT USAGE ON SCHEMA %s TO %s)", n.schema, n.Schema(), user)
	}
	ledger, ledgerExists := a.tables["schema_migrations"]
	if ledgerExists && !ledger.selectOK {
		return fail("lacks SELECT on %s, the migration ledger every export reads first", n.Migrations())
	}
	if len(pending) > 0 {
		// CREATE TABLE IF NOT EXISTS of the ledger, which a migration runs first, needs CREATE
		// on the schema even when the ledger exists.
		if !a.createSchema {
			return fail("lacks CREATE on schema %s: the sink's tables are missing or migration %s is pending, and the next export "+
				"runs it (GRANT CREATE ON SCHEMA %s TO %s, or run kollect sinks postgres-rls as the tables' owner)",
				n.schema, pending[0].name, n.Schema(), user)
		}
		if ledgerExists && !ledger.insertOK {
			return fail("lacks INSERT on %s, where the next export records migration %s", n.Migrations(), pending[0].name)
		}
		// Only a table's owner may alter it.
		for _, m := range pending {
			for _, t := range n.tableNames() {
				if ta, ok := a.tables[t]; ok && !ta.owned && strings.Contains(m.sql, "ALTER TABLE "+n.ident(t)) {
					return fail("does not own %s, which migration %s alters: run it as the table's owner "+
						"(kollect sinks postgres-rls applies the migrations) before this agent exports", n.ident(t), m.name)
				}
			}
		}
		return nil
	}
	written := []string{n.table, n.table + "_state", n.table + "_coverage"}
	if s.history {
		written = append(written, n.table+"_history")
	}
	for _, t := range written {
		ta, ok := a.tables[t]
		if !ok {
			return nil // a dropped table: the export migrates again (see Export), which the checks above cover next time
		}
		if miss := ta.missing("SELECT", "INSERT", "UPDATE", "DELETE"); len(miss) > 0 {
			return fail("lacks %s on %s (GRANT SELECT, INSERT, UPDATE, DELETE ON %[2]s TO %s)", strings.Join(miss, ", "), n.ident(t), user)
		}
	}
	return nil
}
