package postgres

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

// Probe connects, checks the server answers, and checks, without writing, that the
// credentials have what the next export needs: with the schema missing, CREATE on the
// database; with its tables missing or its migrations pending, CREATE on the schema (and
// ownership of the tables the migrations alter); with the tables current, SELECT on the
// ledger and SELECT, INSERT, UPDATE and DELETE on each table an export writes; and TEMP on
// the database, for the staging table. A probe that passes where an export would be refused
// would tell the delivery worker the sink is fine when it is not (see checkAccess).
//
// The reads run in one transaction, begun as every transaction of the sink is (pooling.go):
// the statement timeout bounds them too, and behind a transaction-pooling PgBouncer they see
// one server connection's snapshot.
func (s *Sink) Probe(ctx context.Context) error {
	all, err := migrations(s.names)
	if err != nil {
		return sink.TerminalError(fmt.Errorf("postgres sink %s: %w", s.dest, err))
	}
	var a *access
	done := map[int]bool{}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if a, err = readAccess(ctx, tx, s.names); err != nil {
			return err
		}
		if t, ok := a.tables["schema_migrations"]; ok && a.usage && t.selectOK {
			done, err = appliedVersions(ctx, tx, s.names)
		}
		return err
	})
	if err != nil {
		return s.stepError("checking privileges", err)
	}
	var pending []migration
	for _, m := range all {
		if !done[m.version] {
			pending = append(pending, m)
		}
	}
	return s.checkAccess(a, pending)
}

// Preview lists the DDL the next export would run (pending migrations) and the statements of
// an export of the inventory, with what the state table holds for it now. It only reads; when
// the database is unreachable it still returns the full DDL and says so.
func (s *Sink) Preview(ctx context.Context, cluster, inventory string) (sink.Preview, error) {
	p := sink.Preview{Destination: s.dest}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		p.Statements, _ = pending(ctx, nil, s.names)
		p.Message = fmt.Sprintf("database unreachable (%v): showing every migration", err)
	} else {
		defer conn.Release()
		if p.Statements, err = pending(ctx, conn, s.names); err != nil {
			return p, s.stepError("previewing", err)
		}
		p.Message = s.describeState(ctx, conn, cluster, inventory, len(p.Statements))
	}
	p.Statements = append(p.Statements, s.exportStatements(cluster, inventory)...)
	return p, nil
}

func (s *Sink) describeState(ctx context.Context, q queryer, cluster, inventory string, ddl int) string {
	var msg strings.Builder
	if ddl > 0 {
		fmt.Fprintf(&msg, "%d schema statements pending; ", ddl)
	} else {
		msg.WriteString("schema up to date; ")
	}
	var sum string
	var count int64
	err := q.QueryRow(ctx, "SELECT checksum, item_count FROM "+s.names.State()+" WHERE cluster = $1 AND inventory = $2",
		cluster, inventory).Scan(&sum, &count)
	if err != nil {
		fmt.Fprintf(&msg, "no export of %s/%s recorded: the next export is a full load", cluster, inventory)
	} else {
		fmt.Fprintf(&msg, "%s/%s holds %d rows at checksum %s: the next export applies a diff or nothing", cluster, inventory, count, export.ShortChecksum(sum))
	}
	return msg.String()
}

// exportStatements shows the shape of one export with the cluster and inventory filled in.
func (s *Sink) exportStatements(cluster, inventory string) []string {
	lit := func(v string) string { return "'" + strings.ReplaceAll(v, "'", "''") + "'" }
	c, i := lit(cluster), lit(inventory)
	var history []string
	if s.history {
		history = []string{
			fmt.Sprintf("WITH changed AS (INSERT INTO %s … RETURNING …), closed AS (UPDATE %s SET valid_to = … FROM changed WHERE … AND valid_to IS NULL) INSERT INTO %s … FROM changed  -- history: true, the upsert and its versions in one statement",
				s.names.Rows(), s.names.History(), s.names.History()),
			fmt.Sprintf("WITH gone AS (DELETE FROM %s WHERE cluster = %s AND inventory = %s … RETURNING …) UPDATE %s SET valid_to = … FROM gone WHERE … AND valid_to IS NULL  -- history: true",
				s.names.Rows(), c, i, s.names.History()),
		}
	}
	return slices.Concat([]string{
		"BEGIN",
		fmt.Sprintf("SELECT (SELECT checksum FROM %s WHERE cluster = %s AND inventory = %s), (SELECT json_agg(…) FROM %s WHERE …)", s.names.State(), c, i, s.names.Coverage()),
		"COPY " + stageTable + " FROM STDIN (FORMAT binary)  -- changed rows, or every row on a full reconcile",
		fmt.Sprintf("INSERT INTO %s … SELECT %s, %s, … FROM %s ON CONFLICT (cluster, inventory, target, uid) DO UPDATE … WHERE … IS DISTINCT FROM …", s.names.Rows(), c, i, stageTable),
		fmt.Sprintf("DELETE FROM %s WHERE cluster = %s AND inventory = %s AND (removed keys | keys not staged)", s.names.Rows(), c, i),
	}, history, []string{
		fmt.Sprintf("INSERT INTO %s … ON CONFLICT (cluster, inventory, target) DO UPDATE … WHERE … IS DISTINCT FROM …  -- only when the coverage changed", s.names.Coverage()),
		fmt.Sprintf("DELETE FROM %s WHERE cluster = %s AND inventory = %s AND NOT (target = ANY (covered targets))", s.names.Coverage(), c, i),
		fmt.Sprintf("INSERT INTO %s … ON CONFLICT (cluster, inventory) DO UPDATE SET checksum = …", s.names.State()),
		"COMMIT",
	})
}

// classify marks errors retrying cannot fix as terminal: bad credentials, missing database,
// missing privileges, invalid names and TLS verification failures. Everything else (refused
// connections, timeouts, serialization failures, a server shutting down) stays transient.
// stepError wraps the error of one step of the sink's work (connecting, migrating, exporting).
// When the connection itself failed, the message leads with why and to where: "migrating:
// failed to connect" reads like a schema problem.
func (s *Sink) stepError(step string, err error) error {
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) {
		return classify(fmt.Errorf("postgres sink %s: %s: %w", s.dest, step, err))
	}
	addr := net.JoinHostPort(ce.Config.Host, strconv.Itoa(int(ce.Config.Port)))
	var dnsErr *net.DNSError
	var netErr net.Error
	why := "cannot connect to " + addr
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		why = "connection refused by " + addr + " (is the server running and listening there?)"
	case errors.As(err, &dnsErr):
		why = "cannot resolve " + ce.Config.Host
	case errors.As(err, &netErr) && netErr.Timeout():
		why = "timed out connecting to " + addr
	}
	return classify(fmt.Errorf("postgres sink %s: %s while %s: %w", s.dest, why, step, err))
}

func classify(err error) error {
	if err == nil || sink.ClassOf(err) == sink.Terminal {
		return err
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "28P01", pgErr.Code == "28000": // invalid_password, invalid_authorization_specification
			return sink.TerminalError(err)
		case pgErr.Code == "3D000": // invalid_catalog_name: the database does not exist
			return sink.TerminalError(err)
		case pgErr.Code == "42501": // insufficient_privilege
			return sink.TerminalError(err)
		case strings.HasPrefix(pgErr.Code, "42"), strings.HasPrefix(pgErr.Code, "22"): // syntax/access rule, data exception
			return sink.TerminalError(err)
		}
		return sink.TransientError(err)
	}
	var unknownAuthority x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	if errors.As(err, &unknownAuthority) || errors.As(err, &hostname) || errors.As(err, &invalid) {
		return sink.TerminalError(err)
	}
	if strings.Contains(err.Error(), "server refused TLS connection") {
		return sink.TerminalError(err) // sslmode asks for TLS the server does not offer
	}
	return sink.TransientError(err)
}
