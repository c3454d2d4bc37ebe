// Package postgres is the PostgreSQL database sink: it keeps one row per exported object in a
// table with typed identity columns and JSONB attributes, and the last accepted checksum per
// (cluster, inventory) in a state table, so an unchanged inventory costs one read and no write.
//
// Every export runs in one transaction under a per-(cluster, inventory) advisory lock:
//
//   - state checksum equal to the envelope's: no row is written (and nothing at all when the
//     coverage table holds the envelope's coverage too);
//   - state checksum equal to the batch's PreviousChecksum and the diff not Full: the diff is
//     staged with COPY into a temporary table, upserted, and removed keys are deleted;
//   - otherwise (first export, restart with changed data, drift, resync): a full reconcile of
//     that (cluster, inventory) only, deleting its rows that the snapshot no longer holds.
//
// The batch's per-target coverage goes to <table>_coverage in the same transaction, entry by
// entry and only when it differs from what is stored, so a target turning forbidden (its rows
// kept, the checksum unchanged) rewrites one coverage entry and no row.
//
// Upserts only rewrite rows whose content changed (ON CONFLICT … WHERE … IS DISTINCT FROM), so
// updated_at means "content last changed" and a reconcile of equal data writes no row. Every
// statement that deletes is bounded by the sink's cluster and the batch's inventory: a shared
// database holds many clusters and one agent never touches another's rows.
//
// With history: true the same transaction keeps <table>_history: the upsert's and the
// deletes' RETURNING (only rows actually inserted, rewritten or deleted) close the rows' open
// versions and open the new ones at one instant read after the lock, so unchanged rows write
// no version. The first export or confirmation of each inventory after the sink is built
// brings the history up to the rows (seeding it when history was just turned on), writing
// nothing when they agree. <table>_as_of(ts) reads it; see history.go.
//
// The schema is created by versioned migrations embedded in the binary (migrations/*.sql),
// recorded in <schema>.schema_migrations and applied under a transaction-scoped advisory lock,
// so agents starting together migrate once. Views answer the common fleet questions; see
// docs/sinks/postgres.md.
//
// The sink keeps no state in a session and prepares no named statement: the statement timeout
// is SET LOCAL in every transaction's BEGIN, and pgx runs in cache_describe mode, so it works
// alike connected directly and behind PgBouncer in transaction or session pooling (pooling.go,
// TestContractThroughPgBouncer). Its pools are small and close idle connections after a
// minute: a fleet shares one database (docs/sinks/postgres.md, "For a fleet").
//
// On a shared database, PostgreSQL itself can hold each cluster to its own rows: RowSecuritySQL
// (rls.go, printed by kollect sinks postgres-rls) maps one role per cluster and enables
// row-level security on every table with a cluster column. No statement of the agent reads
// another cluster's rows, so the agent needs nothing more than its policies allow; its first
// load stages rather than COPY into the table, which PostgreSQL refuses under row-level security.
package postgres
