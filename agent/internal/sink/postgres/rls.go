package postgres

import (
	"errors"
	"fmt"
	"strings"
	"unicode"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// RowSecurity describes one cluster's writer on a shared sink: PostgreSQL row-level security
// then lets Role read and write only the rows whose cluster is Cluster, in every table of the
// sink <Schema>.<Table> that carries a cluster column, and lets Reader read all of them.
type RowSecurity struct {
	Schema, Table string
	// Cluster is the agent's cluster name, Role the PostgreSQL role its sink Secret logs in as.
	Cluster, Role string
	// Reader, when set, is the role of dashboards and people: SELECT on everything.
	Reader string
}

// ClusterRoles is the mapping table the policies read: one row per agent role, naming the
// cluster whose rows it may touch. Policies keyed by the mapping (not one per role or
// cluster) stay the same whatever clusters join, so adding one is an INSERT and grants.
func (n names) ClusterRoles() string { return n.ident("cluster_roles") }

// clusterTables are the sink's tables with a cluster column: every one gets the policies.
// schema_migrations (per table, no cluster) and cluster_roles are the schema's only other
// tables; TestRLSScriptCreatesTheSchema checks the list against what the migrations create.
func (n names) clusterTables() []string {
	return []string{n.Rows(), n.State(), n.Coverage(), n.History()}
}

// views are the migrations' views. A view reads its tables with its owner's rights, so row-level
// security would not apply to an agent reading one: agents (which read none) get no access.
func (n names) views() []string {
	return []string{n.View("latest"), n.View("counts"), n.View("images"), n.View("image_usage"), n.View("covered")}
}

// validate refuses what cannot be a role or would make the script say something else than
// meant.
func (rs RowSecurity) validate() error {
	if err := (names{schema: rs.Schema, table: rs.Table}).validate(); err != nil {
		return err
	}
	switch {
	case rs.Schema == "" || rs.Table == "":
		return errors.New("schema and table must not be empty")
	case rs.Cluster == "":
		return errors.New("cluster must not be empty: the role writes only this cluster's rows")
	case rs.Role == "":
		return errors.New("role must not be empty: the role the cluster's agent logs in as")
	case rs.Role == rs.Reader:
		return fmt.Errorf("role %s cannot be the reader too: the reader reads every cluster", rs.Role)
	}
	for _, v := range []string{rs.Schema, rs.Table, rs.Cluster, rs.Role, rs.Reader} {
		// A newline would end the script's comment that names the cluster, and NUL ends a
		// string in PostgreSQL.
		if strings.IndexFunc(v, unicode.IsControl) >= 0 {
			return fmt.Errorf("%q holds a control character", v)
		}
	}
	for _, r := range []string{rs.Role, rs.Reader} {
		switch {
		case len(r) > maxIdentifier:
			return fmt.Errorf("role %q is longer than PostgreSQL's %d bytes", r, maxIdentifier)
		case strings.HasPrefix(r, "pg_"), strings.EqualFold(r, "public"):
			return fmt.Errorf("role %q is reserved by PostgreSQL", r)
		}
	}
	return nil
}

// RowSecuritySQL returns the idempotent SQL script that makes PostgreSQL enforce one writer per
// cluster on the sink: run it as the role that owns (or will own) the sink's tables, never a
// role an agent uses, once per cluster and again after an agent upgrade that adds migrations.
// It runs in one transaction:
//
//  1. the sink's migrations (the agent's own, skipped when the ledger has them), under the lock
//     agents migrate under: agent roles cannot create tables;
//  2. the mapping table <schema>.cluster_roles, and Role mapped to Cluster (created, LOGIN,
//     when missing; refused when it is a superuser or may bypass row-level security);
//  3. Role's grants: USAGE on the schema, SELECT on the ledger and its own mapping row, SELECT,
//     INSERT, UPDATE, DELETE on the cluster tables and nothing else (no TRUNCATE, which row-level
//     security does not filter; no view, which would read as the view's owner);
//  4. row-level security on every cluster table, with one policy for every mapped role (its
//     own cluster only, reading and writing) and one for Reader (SELECT, every row);
//  5. a check that Role does not own, nor belong to the owner of, the schema or a cluster
//     table: row-level security does not apply to a table's owner, and the schema's owner may
//     drop its tables, so the script refuses rather than pretend.
//
// FORCE ROW LEVEL SECURITY is not used: it only matters when an agent role owns the tables,
// which step 5 refuses. No policy lets one cluster read another's rows: no agent statement
// needs to (the writer check reads the state of the agent's own cluster and inventory).
func RowSecuritySQL(rs RowSecurity) (string, error) {
	if err := rs.validate(); err != nil {
		return "", err
	}
	n := names{schema: rs.Schema, table: rs.Table}
	all, err := migrations(n)
	if err != nil {
		return "", err
	}
	role, lit := pgx.Identifier{rs.Role}.Sanitize(), literal
	mine := "cluster = (SELECT m.cluster FROM " + n.ClusterRoles() + " m WHERE m.role = current_user)"
	var b scriptBuilder
	b.line("-- Kollect: one writer per cluster on %s.%s (generated by kollect sinks postgres-rls).", n.Schema(), n.Rows())
	b.line("-- Role %s reads and writes only the rows of cluster %s. Idempotent; run it as the tables' owner.", role, lit(rs.Cluster))
	b.line("BEGIN;")
	b.line("SET LOCAL client_min_messages = warning;")
	b.line("SET LOCAL standard_conforming_strings = on;")
	// The lock agents migrate under: neither migrates while the other does.
	if err := b.do(fmt.Sprintf("PERFORM pg_advisory_xact_lock(hashtextextended(%s, 0));", lit(migrationLockKey))); err != nil {
		return "", err
	}

	b.line("\n-- 1. The sink's schema: the agent's migrations not yet applied.")
	// Guarded rather than IF NOT EXISTS, which needs CREATE on the database even when the
	// schema exists (see createSchemaSQL): an owner of a pre-created schema may lack it.
	if err := b.do(fmt.Sprintf(`IF NOT EXISTS (SELECT FROM pg_namespace WHERE nspname = %s) THEN
    %s;
  END IF;`, lit(rs.Schema), createSchemaSQL(n))); err != nil {
		return "", err
	}
	b.line("%s;", ledgerSQL(n))
	for _, m := range all {
		mig, err := dollarQuote("kollect_migration", m.sql)
		if err != nil {
			return "", fmt.Errorf("migration %s: %w", m.name, err)
		}
		if err := b.do(fmt.Sprintf(`IF NOT EXISTS (SELECT FROM %s WHERE table_name = %s AND version = %d) THEN
    EXECUTE %s;
    INSERT INTO %[1]s (table_name, version, name) VALUES (%[2]s, %[3]d, %[5]s);
  END IF;`, n.Migrations(), lit(rs.Table), m.version, mig, lit(m.name))); err != nil {
			return "", err
		}
	}

	b.line("\n-- 2. Which cluster each agent role writes; a role reads only its own mapping.")
	b.line("CREATE TABLE IF NOT EXISTS %s (role name PRIMARY KEY, cluster text NOT NULL);", n.ClusterRoles())
	b.line("ALTER TABLE %s ENABLE ROW LEVEL SECURITY;", n.ClusterRoles())
	b.line("DROP POLICY IF EXISTS kollect_own_role ON %s;", n.ClusterRoles())
	b.line("CREATE POLICY kollect_own_role ON %s FOR SELECT USING (role = current_user);", n.ClusterRoles())
	if err := b.do(fmt.Sprintf(`IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = %[1]s) THEN
    CREATE ROLE %[2]s LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
  ELSIF EXISTS (SELECT FROM pg_roles WHERE rolname = %[1]s AND (rolsuper OR rolbypassrls)) THEN
    RAISE EXCEPTION 'role %% is a superuser or has BYPASSRLS: row-level security would not apply to it', %[1]s;
  END IF;`, lit(rs.Role), role)); err != nil {
		return "", err
	}
	b.line("INSERT INTO %s (role, cluster) VALUES (%s, %s)\n    ON CONFLICT (role) DO UPDATE SET cluster = EXCLUDED.cluster;",
		n.ClusterRoles(), lit(rs.Role), lit(rs.Cluster))

	b.line("\n-- 3. What the role may do: the cluster tables, and read the ledger; nothing else.")
	b.line("REVOKE ALL ON SCHEMA %s FROM %s;", n.Schema(), role)
	b.line("GRANT USAGE ON SCHEMA %s TO %s;", n.Schema(), role)
	b.line("REVOKE ALL ON %s FROM %s;", strings.Join(append(append(n.clusterTables(), n.views()...), n.Migrations(), n.ClusterRoles()), ", "), role)
	b.line("GRANT SELECT ON %s, %s TO %s;", n.Migrations(), n.ClusterRoles(), role)
	b.line("GRANT SELECT, INSERT, UPDATE, DELETE ON %s TO %s;", strings.Join(n.clusterTables(), ", "), role)

	b.line("\n-- 4. Row-level security: a mapped role sees and writes its own cluster's rows only.")
	for _, t := range n.clusterTables() {
		b.line("ALTER TABLE %s ENABLE ROW LEVEL SECURITY;", t)
		b.line("DROP POLICY IF EXISTS kollect_own_cluster ON %s;", t)
		b.line("CREATE POLICY kollect_own_cluster ON %s USING (%s) WITH CHECK (%s);", t, mine, mine)
	}
	if rs.Reader != "" {
		reader := pgx.Identifier{rs.Reader}.Sanitize()
		b.line("\n-- The reader: every table and view of the schema, every cluster, read only.")
		if err := b.do(fmt.Sprintf(`IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = %s) THEN
    CREATE ROLE %s NOLOGIN;
  END IF;`, lit(rs.Reader), reader)); err != nil {
			return "", err
		}
		b.line("GRANT USAGE ON SCHEMA %s TO %s;", n.Schema(), reader)
		b.line("GRANT SELECT ON ALL TABLES IN SCHEMA %s TO %s;", n.Schema(), reader)
		b.line("ALTER DEFAULT PRIVILEGES IN SCHEMA %s GRANT SELECT ON TABLES TO %s;", n.Schema(), reader)
		for _, t := range append(n.clusterTables(), n.ClusterRoles()) {
			b.line("DROP POLICY IF EXISTS kollect_reader ON %s;", t)
			b.line("CREATE POLICY kollect_reader ON %s FOR SELECT TO %s USING (true);", t, reader)
		}
	}

	b.line("\n-- 5. Row-level security does not apply to a table's owner (nor to its members), and the")
	b.line("--    schema's owner may drop the tables: the role must be neither.")
	if err := b.do(fmt.Sprintf(`IF EXISTS (SELECT FROM pg_class c WHERE c.oid = ANY (ARRAY[%s]::regclass[])
               AND pg_has_role(%[2]s, c.relowner, 'MEMBER'))
     OR pg_has_role(%[2]s, (SELECT nspowner FROM pg_namespace WHERE nspname = %[3]s), 'MEMBER') THEN
    RAISE EXCEPTION 'role %% owns the schema or a table of the sink, or is a member of their owner: row-level security would not bind it', %[2]s
      USING HINT = 'give the schema and tables to an administrator role no agent uses (ALTER ... OWNER TO), and run this as that role';
  END IF;`, quotedList(append(n.clusterTables(), n.ClusterRoles())), lit(rs.Role), lit(rs.Schema))); err != nil {
		return "", err
	}
	b.line("COMMIT;")
	return b.String(), nil
}

// scriptBuilder accumulates the script's lines.
type scriptBuilder struct{ strings.Builder }

func (b *scriptBuilder) line(format string, args ...any) {
	fmt.Fprintf(&b.Builder, format, args...)
	b.WriteByte('\n')
}

// do appends a DO block running body.
func (b *scriptBuilder) do(body string) error {
	q, err := dollarQuote("kollect", "\nBEGIN\n  "+body+"\nEND\n")
	if err != nil {
		return err
	}
	b.line("DO %s;", q)
	return nil
}

// dollarQuote quotes s with the tag, which s must not hold: the names in it come from flags.
func dollarQuote(tag, s string) (string, error) {
	d := "$" + tag + "$"
	if strings.Contains(s, d) {
		return "", fmt.Errorf("the script would hold %s inside a block quoted by it: choose other names", d)
	}
	return d + s + d, nil
}

// literal quotes a string constant (standard_conforming_strings, on by default since 9.1).
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// quotedList is a comma-separated list of literals of idents.
func quotedList(idents []string) string {
	out := make([]string, len(idents))
	for i, id := range idents {
		out[i] = literal(id)
	}
	return strings.Join(out, ", ")
}

// refusedCluster explains a write the database's row-level security refused: the sink's user is
// mapped to another cluster than the one it exports (or to none), which only a change of the
// sink's Secret, the agent's cluster name or the mapping fixes. The error stays the server's
// (insufficient_privilege, which classify makes terminal); any other error is returned as is.
func (s *Sink) refusedCluster(cluster string, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" || !strings.Contains(pgErr.Message, "row-level security") {
		return err
	}
	return fmt.Errorf("user %s may not write the rows of cluster %s: the database's row-level security lets each user write only "+
		"the cluster %s maps it to (check the sink's Secret and the agent's cluster name): %w", s.user, cluster, s.names.ClusterRoles(), err)
}
