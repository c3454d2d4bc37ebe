package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"kollect.dev/hub/internal/store"
)

const heartbeatCols = `at, agent_version, applied_digest, inventories, items, inventories_not_ready, sink_errors, state`

func scanHeartbeat(sc scanner) (store.HeartbeatRecord, error) {
	var (
		r  store.HeartbeatRecord
		at int64
	)
	err := sc.Scan(&at, &r.AgentVersion, &r.AppliedDigest, &r.Inventories, &r.Items, &r.InventoriesNotReady, &r.SinkErrors, &r.State)
	r.At = fromMS(at)
	return r, err
}

// RecordHeartbeat implements store.Store.
func (s *Store) RecordHeartbeat(ctx context.Context, h store.Heartbeat) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.q(`UPDATE clusters SET last_heartbeat = ?, agent_version = ?,
			kubernetes_version = ?, applied_digest = ?, status = ? WHERE name = ? AND revoked = 0`),
			ms(h.At), h.AgentVersion, h.KubernetesVersion, h.AppliedDigest, h.Status, h.Cluster)
		if err != nil {
			return fmt.Errorf("recording heartbeat of %s: %w", h.Cluster, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("recording heartbeat of %s: %w", h.Cluster, store.ErrNotFound)
		}
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE cluster_bundles SET applied_revision = 0 WHERE cluster = ?`), h.Cluster); err != nil {
			return fmt.Errorf("recording applied revisions of %s: %w", h.Cluster, err)
		}
		for bundle, rev := range h.Applied {
			if _, err := tx.ExecContext(ctx, s.q(`UPDATE cluster_bundles SET applied_revision = ?
				WHERE cluster = ? AND bundle = ?`), rev, h.Cluster, bundle); err != nil {
				return fmt.Errorf("recording applied revision of %s/%s: %w", h.Cluster, bundle, err)
			}
		}
		return s.recordHistory(ctx, tx, h)
	})
}

// recordHistory adds the heartbeat's record unless the newest one says the same and is recent.
// The common case — an agent reporting what it reported a moment ago — costs one indexed read
// and writes nothing; a new record also prunes the cluster's oldest beyond HistoryLimit.
func (s *Store) recordHistory(ctx context.Context, tx *sql.Tx, h store.Heartbeat) error {
	rec := h.Record
	rec.At = h.At
	last, err := scanHeartbeat(tx.QueryRowContext(ctx, s.q(`SELECT `+heartbeatCols+` FROM cluster_heartbeats
		WHERE cluster = ? ORDER BY id DESC LIMIT 1`), h.Cluster))
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return fmt.Errorf("reading the heartbeat history of %s: %w", h.Cluster, err)
	case last.SameValues(rec) && rec.At.Sub(last.At) < store.HistoryInterval:
		return nil
	}
	if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO cluster_heartbeats (cluster, `+heartbeatCols+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`), h.Cluster, ms(rec.At), rec.AgentVersion, rec.AppliedDigest,
		rec.Inventories, rec.Items, rec.InventoriesNotReady, rec.SinkErrors, rec.State); err != nil {
		return fmt.Errorf("recording the heartbeat history of %s: %w", h.Cluster, err)
	}
	// Everything from the (HistoryLimit+1)-th newest row down; usually exactly one row.
	if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM cluster_heartbeats WHERE cluster = ? AND id <= (
		SELECT id FROM cluster_heartbeats WHERE cluster = ? ORDER BY id DESC LIMIT 1 OFFSET ?)`),
		h.Cluster, h.Cluster, store.HistoryLimit); err != nil {
		return fmt.Errorf("pruning the heartbeat history of %s: %w", h.Cluster, err)
	}
	return nil
}

// Heartbeats implements store.Store.
func (s *Store) Heartbeats(ctx context.Context, cluster string, limit int) ([]store.HeartbeatRecord, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM clusters WHERE name = ?`), cluster).Scan(&n); err != nil {
		return nil, fmt.Errorf("reading cluster %s: %w", cluster, err)
	}
	if n == 0 {
		return nil, fmt.Errorf("cluster %s: %w", cluster, store.ErrNotFound)
	}
	return queryAll(ctx, s.db, "the heartbeat history of "+cluster, scanHeartbeat, s.q(`SELECT `+heartbeatCols+`
		FROM cluster_heartbeats WHERE cluster = ? ORDER BY id DESC LIMIT ?`), cluster, limit)
}
