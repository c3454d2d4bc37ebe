package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// PgBouncerBinary is where Debian's pgbouncer package installs the pooler.
const PgBouncerBinary = "/usr/sbin/pgbouncer"

// PgBouncer is a real PgBouncer (Debian's) on 127.0.0.1 in front of a test PostgreSQL, for
// tests of clients behind a connection pooler: every database of the server is reachable
// through it under its own name.
type PgBouncer struct {
	*Process
	Port int
	// PoolMode is the pool_mode it runs with (SHOW CONFIG's): transaction or session.
	PoolMode string
	// adminPassword is the admin console's password (user pgbouncerAdmin).
	adminPassword string
}

// PgBouncerOptions configure StartPgBouncer.
type PgBouncerOptions struct {
	// PoolMode is pool_mode: "transaction" (the default: what a fleet in front of one
	// PostgreSQL runs) or "session".
	PoolMode string
	// PoolSize is default_pool_size: the server connections per (database, user). 0 keeps
	// PgBouncer's default (20).
	PoolSize int
	// Users are the logins PgBouncer accepts, name → password. The empty map means the
	// server's superuser postgres without a password, as Postgres.URL connects. When every
	// user has a password PgBouncer checks it (auth_type scram-sha-256), and logs in to
	// PostgreSQL with it (Postgres.RequirePassword's roles); otherwise it checks none.
	Users map[string]string
	// Config holds more [pgbouncer] settings in pgbouncer.ini's syntax (a documented
	// fragment, with or without its "[pgbouncer]" line), after PoolMode and PoolSize, which
	// it may override, and before the harness's listen address, auth and logging, which it may
	// not. Other sections are refused: the harness owns [databases].
	Config string
}

// pgbouncerAdmin is the admin console's user (admin_users), which no test connects as.
const pgbouncerAdmin = "kollect_pgbouncer_admin"

// StartPgBouncer starts PgBouncer in front of pg on a free port of 127.0.0.1 and returns
// once its admin console answers. PgBouncer refuses to run as root, so as root it runs as the
// postgres user, as StartPostgres does.
func StartPgBouncer(pg *Postgres, opts PgBouncerOptions) (*PgBouncer, error) {
	if _, err := os.Stat(PgBouncerBinary); err != nil {
		return nil, fmt.Errorf("PgBouncer is not installed (%w): run hack/ensure-packages.sh servers", err)
	}
	mode := opts.PoolMode
	if mode == "" {
		mode = "transaction"
	}
	if mode != "transaction" && mode != "session" {
		return nil, fmt.Errorf("pgbouncer: pool mode %q: want transaction or session", mode)
	}
	users := opts.Users
	if len(users) == 0 {
		users = map[string]string{"postgres": ""}
	}
	adminPassword, err := randomHex(16)
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "kollect-pgbouncer-")
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*PgBouncer, error) {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	// The postgres user reads the files: the directory must let it in.
	if err := os.Chmod(dir, 0o755); err != nil {
		return fail(err)
	}
	ini, userlist := filepath.Join(dir, "pgbouncer.ini"), filepath.Join(dir, "userlist.txt")
	conf, err := pgbouncerINI(pg.Port, port, mode, opts, authType(users), userlist)
	if err != nil {
		return fail(err)
	}
	files := map[string]string{
		ini:      conf,
		userlist: userlistTxt(users, adminPassword),
	}
	for path, body := range files {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			return fail(err)
		}
	}
	var serveAs []string
	if os.Geteuid() == 0 {
		if out, err := exec.Command("chown", "postgres:postgres", ini, userlist).CombinedOutput(); err != nil {
			return fail(fmt.Errorf("chown pgbouncer's configuration: %v: %s", err, out))
		}
		// setpriv execs PgBouncer in place with its own parent-death signal (a change of user
		// clears the one StartProcess sets): a killed test leaves no pgbouncer.
		serveAs = []string{"setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--pdeathsig=KILL", "--"}
	}
	cmdline := append(serveAs, PgBouncerBinary, ini)
	b := &PgBouncer{Port: port, adminPassword: adminPassword}
	ready := func() error {
		_, err := b.Show(context.Background(), "VERSION")
		return err
	}
	p, err := StartProcess("pgbouncer", dir, cmdline[0], cmdline[1:], nil, ready)
	if err != nil {
		return nil, err // StartProcess removed the directory
	}
	b.Process = p
	// What it runs with, opts.Config included.
	if b.PoolMode, err = b.Setting(context.Background(), "pool_mode"); err != nil {
		p.Stop()
		return nil, err
	}
	return b, nil
}

// Setting returns the value of one setting as PgBouncer runs with it (SHOW CONFIG).
func (b *PgBouncer) Setting(ctx context.Context, key string) (string, error) {
	rows, err := b.Show(ctx, "CONFIG")
	if err != nil {
		return "", err
	}
	for _, r := range rows {
		if r["key"] == key {
			return r["value"], nil
		}
	}
	return "", fmt.Errorf("pgbouncer SHOW CONFIG has no setting %s", key)
}

// pgbouncerINI renders pgbouncer.ini: every database of the server at serverPort through the
// wildcard entry, the pool mode and size, opts.Config, then what the harness needs: its port,
// no Unix socket (its default directory, /tmp, is shared by every test) and its auth file.
//
// One [pgbouncer] section only: PgBouncer 1.18 starts a repeated section from the defaults,
// so a fragment with its own "[pgbouncer]" line appended after ours made it listen on
// /tmp/.s.PGSQL.6432 instead of the test's port.
func pgbouncerINI(serverPort, port int, mode string, opts PgBouncerOptions, auth, userlist string) (string, error) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "[databases]\n* = host=127.0.0.1 port=%d\n\n[pgbouncer]\n", serverPort)
	fmt.Fprintf(&sb, "pool_mode = %s\n", mode)
	if opts.PoolSize > 0 {
		fmt.Fprintf(&sb, "default_pool_size = %d\n", opts.PoolSize)
	}
	for _, line := range strings.Split(opts.Config, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "[") {
			if trimmed != "[pgbouncer]" {
				return "", fmt.Errorf("pgbouncer: Config may hold [pgbouncer] settings only, not %s", trimmed)
			}
			continue
		}
		sb.WriteString(line + "\n")
	}
	fmt.Fprintf(&sb, "listen_addr = 127.0.0.1\nlisten_port = %d\nunix_socket_dir =\n", port)
	fmt.Fprintf(&sb, "auth_type = %s\nauth_file = %s\nadmin_users = %s\n", auth, userlist, pgbouncerAdmin)
	// Every client and server connection is logged, so a failure shows what PgBouncer did.
	sb.WriteString("log_connections = 1\nlog_disconnections = 1\n")
	return sb.String(), nil
}

// authType is scram-sha-256 when every user has a password, otherwise trust: PgBouncer
// then checks no password, as the test PostgreSQL (initdb -A trust) does not, and still
// accepts only the users of the auth file.
func authType(users map[string]string) string {
	for _, pw := range users {
		if pw == "" {
			return "trust"
		}
	}
	return "scram-sha-256"
}

// userlistTxt is the auth file: "name" "password" per user, the admin console's user too.
func userlistTxt(users map[string]string, adminPassword string) string {
	quote := func(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
	names := make([]string, 0, len(users))
	for name := range users {
		names = append(names, name)
	}
	sort.Strings(names)
	var sb strings.Builder
	for _, name := range names {
		fmt.Fprintf(&sb, "%s %s\n", quote(name), quote(users[name]))
	}
	fmt.Fprintf(&sb, "%s %s\n", quote(pgbouncerAdmin), quote(adminPassword))
	return sb.String()
}

func randomHex(n int) (string, error) {
	buf := make([]byte, n)
	if _, err := rand.Read(buf); err != nil {
		return "", fmt.Errorf("random password: %w", err)
	}
	return hex.EncodeToString(buf), nil
}

// URL connects through PgBouncer as user (no password in the URL) to database db.
func (b *PgBouncer) URL(user, db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", user, b.Port, db)
}

// Show runs SHOW <what> (POOLS, STATS, SERVERS, CLIENTS, VERSION…) on the admin console
// with psql, a client the project did not write, and returns its rows, each column by name.
func (b *PgBouncer) Show(ctx context.Context, what string) ([]map[string]string, error) {
	url := fmt.Sprintf("postgres://%s@127.0.0.1:%d/pgbouncer?sslmode=disable", pgbouncerAdmin, b.Port)
	cmd := exec.CommandContext(ctx, "psql", url, "-X", "-q", "-A", "-F", "\t", "-P", "footer=off", "-c", "SHOW "+what)
	cmd.Env = append(os.Environ(), "PGPASSWORD="+b.adminPassword)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("pgbouncer SHOW %s: %v: %s", what, err, strings.TrimSpace(string(out)))
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) == 0 || lines[0] == "" {
		return nil, fmt.Errorf("pgbouncer SHOW %s: no header in %q", what, out)
	}
	header := strings.Split(lines[0], "\t")
	var rows []map[string]string
	for _, line := range lines[1:] {
		fields := strings.Split(line, "\t")
		if len(fields) != len(header) {
			return nil, fmt.Errorf("pgbouncer SHOW %s: row %q does not match header %q", what, line, lines[0])
		}
		row := make(map[string]string, len(header))
		for i, h := range header {
			row[h] = fields[i]
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// PgBouncerPool is one line of SHOW POOLS: the clients and server connections of one
// (database, user) pool right now.
type PgBouncerPool struct {
	Database, User, PoolMode string
	// ClActive are clients linked to a server connection or idle; ClWaiting wait for one.
	ClActive, ClWaiting int
	// SvActive are server connections linked to a client, SvIdle and SvUsed unlinked ones
	// (SvUsed not yet checked), SvTested and SvLogin being reset or logging in.
	SvActive, SvIdle, SvUsed, SvTested, SvLogin int
}

// Servers is every server connection of the pool, whatever its state.
func (p PgBouncerPool) Servers() int {
	return p.SvActive + p.SvIdle + p.SvUsed + p.SvTested + p.SvLogin
}

// Pool returns SHOW POOLS's line of (db, user); a pool not opened yet is all zero.
func (b *PgBouncer) Pool(ctx context.Context, db, user string) (PgBouncerPool, error) {
	rows, err := b.Show(ctx, "POOLS")
	if err != nil {
		return PgBouncerPool{}, err
	}
	p := PgBouncerPool{Database: db, User: user, PoolMode: b.PoolMode}
	for _, r := range rows {
		if r["database"] != db || r["user"] != user {
			continue
		}
		p.PoolMode = r["pool_mode"]
		err := atois(r, map[string]*int{"cl_active": &p.ClActive, "cl_waiting": &p.ClWaiting, "sv_active": &p.SvActive,
			"sv_idle": &p.SvIdle, "sv_used": &p.SvUsed, "sv_tested": &p.SvTested, "sv_login": &p.SvLogin})
		if err != nil {
			return p, fmt.Errorf("pgbouncer SHOW POOLS: %w", err)
		}
	}
	return p, nil
}

// PgBouncerStats is SHOW STATS's line of one database: what went through PgBouncer since it
// started.
type PgBouncerStats struct {
	Database string
	// XactCount and QueryCount are the transactions and statements PgBouncer relayed
	// (total_xact_count, total_query_count).
	XactCount, QueryCount int
}

// Stats returns SHOW STATS's line of db; a database nobody used yet is all zero.
func (b *PgBouncer) Stats(ctx context.Context, db string) (PgBouncerStats, error) {
	rows, err := b.Show(ctx, "STATS")
	if err != nil {
		return PgBouncerStats{}, err
	}
	s := PgBouncerStats{Database: db}
	for _, r := range rows {
		if r["database"] != db {
			continue
		}
		if err := atois(r, map[string]*int{"total_xact_count": &s.XactCount, "total_query_count": &s.QueryCount}); err != nil {
			return s, fmt.Errorf("pgbouncer SHOW STATS: %w", err)
		}
	}
	return s, nil
}

// atois parses the named columns of row into the integers they point to.
func atois(row map[string]string, cols map[string]*int) error {
	var errs []error
	for col, dst := range cols {
		v, err := strconv.Atoi(row[col])
		if err != nil {
			errs = append(errs, fmt.Errorf("column %s: %w", col, err))
			continue
		}
		*dst = v
	}
	return errors.Join(errs...)
}
