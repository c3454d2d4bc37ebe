// Package sqlstore implements store.Store over database/sql for SQLite (modernc.org/sqlite,
// pure Go, the default) and PostgreSQL (pgx, for several hub replicas). Both run the same
// schema from the same embedded, versioned migrations; the only dialect differences are the
// placeholder syntax, the audit log's id column and how a migration takes its lock.
package sqlstore
