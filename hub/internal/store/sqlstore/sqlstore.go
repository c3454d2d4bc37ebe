package sqlstore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"modernc.org/sqlite" // registers the "sqlite" database/sql driver
	sqlite3 "modernc.org/sqlite/lib"

	"kollect.dev/hub/internal/store"
)

//go:embed migrations/*.sql
var migrations embed.FS

// dialect holds the few things SQLite and PostgreSQL spell differently.
type dialect struct {
	name   string
	autoID string
	// numbered placeholders ($1) instead of ?
	numbered bool
	// migrationLock serialises hub replicas migrating the same database at start-up.
	migrationLock string
}

var (
	sqliteDialect   = dialect{name: "sqlite", autoID: "INTEGER PRIMARY KEY AUTOINCREMENT"}
	postgresDialect = dialect{name: "postgres", autoID: "BIGSERIAL PRIMARY KEY", numbered: true,
		migrationLock: "SELECT pg_advisory_xact_lock(7468327)"}
)

// Store is the SQL implementation of store.Store.
type Store struct {
	db *sql.DB
	d  dialect
	// dsn is the PostgreSQL connection string WatchConfig listens with; "" on SQLite.
	dsn string
	// clusterEpoch is the cluster epoch on SQLite (see bumpClusterEpoch).
	clusterEpoch atomic.Int64
	// stmts holds the prepared statements of the hot paths (hotQueries), by query.
	stmts map[string]*sql.Stmt
	// marks are the heartbeat marks this replica last wrote, per cluster (PostgreSQL only).
	marks marksCache
}

var _ store.Store = (*Store)(nil)

// Open connects to dsn and migrates the schema. A dsn starting with postgres:// or
// postgresql:// is PostgreSQL; anything else is an SQLite file path (an optional "sqlite:"
// prefix is dropped).
func Open(ctx context.Context, dsn string) (*Store, error) {
	var (
		s   *Store
		err error
	)
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		s, err = openPostgres(dsn)
	} else {
		s, err = openSQLite(strings.TrimPrefix(dsn, "sqlite:"))
	}
	if err != nil {
		return nil, err
	}
	if err := s.migrate(ctx); err != nil {
		s.db.Close()
		return nil, err
	}
	if err := s.prepare(ctx); err != nil {
		s.Close()
		return nil, err
	}
	epoch, err := s.readClusterEpoch(ctx)
	if err != nil {
		s.db.Close()
		return nil, err
	}
	s.clusterEpoch.Store(epoch)
	return s, nil
}

func openPostgres(dsn string) (*Store, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("opening postgres: %w", err)
	}
	// PostgreSQL plans a prepared statement again on each call while it estimates the
	// custom plans cheaper than the generic one, which it did for the heartbeat statement
	// (qHeartbeatPostgres): planning took as long as running it, at every heartbeat. The
	// store's statements are point reads and writes, and whole-table reads, whose best plan
	// does not depend on their parameters' values.
	if _, set := cfg.RuntimeParams["plan_cache_mode"]; !set {
		cfg.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	return &Store{db: db, d: postgresDialect, dsn: dsn}, nil
}

func openSQLite(path string) (*Store, error) {
	if path == "" {
		return nil, errors.New("sqlite store needs a file path")
	}
	if err := private(path); err != nil {
		return nil, err
	}
	// WAL and a busy timeout let readers run beside the writer; immediate transactions take
	// the write lock up front so two writers never deadlock upgrading a read lock.
	dsn := "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)" +
		"&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("opening sqlite %s: %w", path, err)
	}
	// One connection: SQLite has one writer anyway, and a single connection keeps every
	// transaction strictly serialised, which RegisterCluster and CreateRevision rely on.
	db.SetMaxOpenConns(1)
	return &Store{db: db, d: sqliteDialect}, nil
}

// Close closes the prepared statements and the database.
func (s *Store) Close() error {
	for _, st := range s.stmts {
		_ = st.Close()
	}
	return s.db.Close()
}

// q rewrites ? placeholders for the dialect. Queries never contain a literal '?'.
func (s *Store) q(query string) string {
	if !s.d.numbered {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// querier is what *sql.DB and *sql.Tx share.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// inTx runs fn in a transaction, committing when it returns nil.
func (s *Store) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("beginning transaction: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("committing: %w", err)
	}
	return nil
}

// bumpEpoch increases the config epoch. Every transaction that changes desired configuration
// calls it first: on PostgreSQL the row lock it takes serialises such transactions, so a
// registration and a new revision can never both miss each other.
func (s *Store) bumpEpoch(ctx context.Context, tx querier) error {
	_, err := tx.ExecContext(ctx, s.q(`UPDATE hub_state SET value = value + 1 WHERE key = 'config_epoch'`))
	if err != nil {
		return fmt.Errorf("bumping config epoch: %w", err)
	}
	if s.d.name == postgresDialect.name {
		// Delivered to every listening replica when (and only if) the transaction commits.
		if _, err := tx.ExecContext(ctx, `SELECT pg_notify('`+configChannel+`', '')`); err != nil {
			return fmt.Errorf("notifying the other replicas: %w", err)
		}
	}
	return nil
}

// ConfigEpoch implements store.Store.
func (s *Store) ConfigEpoch(ctx context.Context) (int64, error) {
	var v int64
	err := s.db.QueryRowContext(ctx, s.q(`SELECT value FROM hub_state WHERE key = 'config_epoch'`)).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("reading config epoch: %w", err)
	}
	return v, nil
}

// migrate applies, in order, every embedded migration not yet recorded in schema_migrations.
func (s *Store) migrate(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)`); err != nil {
		return fmt.Errorf("creating schema_migrations: %w", err)
	}
	files, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return fmt.Errorf("listing migrations: %w", err)
	}
	sort.Strings(files)
	for _, file := range files {
		base := strings.TrimPrefix(file, "migrations/")
		version, err := strconv.ParseInt(strings.SplitN(base, "_", 2)[0], 10, 64)
		if err != nil {
			return fmt.Errorf("migration %s: name must start with a number: %w", base, err)
		}
		raw, err := migrations.ReadFile(file)
		if err != nil {
			return fmt.Errorf("reading migration %s: %w", base, err)
		}
		script := strings.ReplaceAll(string(raw), "{{autoid}}", s.d.autoID)
		err = s.inTx(ctx, func(tx *sql.Tx) error {
			if s.d.migrationLock != "" {
				if _, err := tx.ExecContext(ctx, s.d.migrationLock); err != nil {
					return fmt.Errorf("taking migration lock: %w", err)
				}
			}
			var n int
			if err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM schema_migrations WHERE version = ?`), version).Scan(&n); err != nil {
				return fmt.Errorf("checking migration %d: %w", version, err)
			}
			if n > 0 {
				return nil
			}
			if _, err := tx.ExecContext(ctx, script); err != nil {
				return fmt.Errorf("applying migration %s: %w", base, err)
			}
			_, err := tx.ExecContext(ctx, s.q(`INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`),
				version, ms(time.Now()))
			return err
		})
		if err != nil {
			return fmt.Errorf("migrating %s store: %w", s.d.name, err)
		}
	}
	return nil
}

// ms and fromMS store times as Unix milliseconds; the zero time is 0.
func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v).UTC()
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// notFound turns sql.ErrNoRows into store.ErrNotFound with context.
func notFound(err error, what string) error {
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%s: %w", what, store.ErrNotFound)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// isUniqueViolation recognises a unique-constraint failure from either driver.
func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "23505" // unique_violation
	}
	var liteErr *sqlite.Error
	if errors.As(err, &liteErr) {
		return liteErr.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || liteErr.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
	}
	return false
}

// private makes the database file, and its WAL and shared-memory files when present, readable
// by the hub's user only: they hold token hashes, cluster credentials' hashes and the fleet's
// configuration. SQLite gives the -wal and -shm files it creates the database file's mode, so
// creating the database file 0600 first is enough for a new store; an existing one is fixed.
func private(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("opening sqlite %s: %w", path, err)
	}
	_ = f.Close()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Chmod(p, 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("making %s private: %w", p, err)
		}
	}
	return nil
}
