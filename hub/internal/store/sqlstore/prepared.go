package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
)

// Queries of the hot paths (every heartbeat, credential check and rollout-engine pass), written
// with ?. Open prepares them once: parsed again on each call, they cost more than running them
// on SQLite.
const (
	qHeartbeatPrevious = `SELECT last_heartbeat, history_at, history_key, history_unpruned, applied_checked,
		credential_hash, credential_expires_at, previous_credential_hash, previous_expires_at
		FROM clusters WHERE name = ? AND revoked = 0`
	qHeartbeatCluster = `UPDATE clusters SET last_heartbeat = ?, agent_version = ?,
		kubernetes_version = ?, applied_digest = ?, status = ?, history_at = ?, history_key = ?, history_unpruned = ?,
		applied_checked = CASE WHEN applied_checked = ? THEN ? ELSE applied_checked END,
		credential_used = CASE WHEN credential_hash = ? THEN 1 ELSE credential_used END WHERE name = ? AND revoked = 0`
	qAppliedRead   = `SELECT bundle, applied_revision FROM cluster_bundles WHERE cluster = ?`
	qAppliedWrite  = `UPDATE cluster_bundles SET applied_revision = ? WHERE cluster = ? AND bundle = ?`
	qHistoryInsert = `INSERT INTO cluster_heartbeats (cluster, ` + heartbeatCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`
	qHistoryPrune  = `DELETE FROM cluster_heartbeats WHERE cluster = ? AND id <= (
		SELECT id FROM cluster_heartbeats WHERE cluster = ? ORDER BY id DESC LIMIT 1 OFFSET ?)`
	qClusterByCredential = `SELECT ` + clusterCols + ` FROM clusters WHERE credential_hash = ?`
	qClusterByPrevious   = `SELECT ` + clusterCols + ` FROM clusters WHERE previous_credential_hash = ?`
	qClusterEpoch        = `SELECT value FROM hub_state WHERE key = 'cluster_epoch'`
	qObserveFleet        = `SELECT c.name, c.labels, c.revoked, c.last_heartbeat, COALESCE(cb.desired_revision, 0)
		FROM clusters c LEFT JOIN cluster_bundles cb ON cb.cluster = c.name AND cb.bundle = ?
		WHERE c.approval <> 'pending' ORDER BY c.name`
)

var hotQueries = []string{qHeartbeatPrevious, qHeartbeatCluster, qAppliedRead, qAppliedWrite,
	qHistoryInsert, qHistoryPrune, qClusterByCredential, qClusterByPrevious, qClusterEpoch, qObserveFleet}

// hotQueriesPostgres are the hot queries written for PostgreSQL alone.
var hotQueriesPostgres = []string{qHeartbeatPostgres}

// prepare prepares every hot query; Open calls it once the schema is migrated.
func (s *Store) prepare(ctx context.Context) error {
	queries := hotQueries
	if s.d.name == postgresDialect.name {
		queries = append(queries[:len(queries):len(queries)], hotQueriesPostgres...)
	}
	s.stmts = make(map[string]*sql.Stmt, len(queries))
	for _, q := range queries {
		st, err := s.db.PrepareContext(ctx, s.q(q))
		if err != nil {
			return fmt.Errorf("preparing %q: %w", q, err)
		}
		s.stmts[q] = st
	}
	return nil
}

// stmt is a hot query's prepared statement (outside a transaction).
func (s *Store) stmt(query string) *sql.Stmt {
	st, ok := s.stmts[query]
	if !ok {
		panic("sqlstore: query not in hotQueries: " + query)
	}
	return st
}

// txStmt is a hot query's prepared statement bound to tx: tx.StmtContext reuses the statement
// already prepared on the transaction's connection.
func (s *Store) txStmt(ctx context.Context, tx *sql.Tx, query string) *sql.Stmt {
	return tx.StmtContext(ctx, s.stmt(query))
}
