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

// RecordHeartbeat implements store.Store. A fleet's heartbeats are the store's most frequent
// write, so it writes only what changed: the cluster's row (its heartbeat time and status
// always change), the applied revisions that differ from the stored ones, and a history record
// when recordHistory calls for one. Its statements are prepared once (prepared).
func (s *Store) RecordHeartbeat(ctx context.Context, h store.Heartbeat) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if h.StateAt != nil {
			st := s.txStmt(ctx, tx, qHeartbeatPrevious)
			var prev int64
			if err := st.QueryRowContext(ctx, h.Cluster).Scan(&prev); err != nil {
				return notFound(err, "recording heartbeat of "+h.Cluster)
			}
			h.Record.State = h.StateAt(fromMS(prev))
		}
		st := s.txStmt(ctx, tx, qHeartbeatCluster)
		res, err := st.ExecContext(ctx, ms(h.At), h.AgentVersion, h.KubernetesVersion, h.AppliedDigest, h.Status, h.Cluster)
		if err != nil {
			return fmt.Errorf("recording heartbeat of %s: %w", h.Cluster, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("recording heartbeat of %s: %w", h.Cluster, store.ErrNotFound)
		}
		if err := s.recordApplied(ctx, tx, h); err != nil {
			return err
		}
		return s.recordHistory(ctx, tx, h)
	})
}

// recordApplied sets each desired bundle's applied revision to what the heartbeat reports (0
// for a bundle it does not report), writing only the rows that change.
func (s *Store) recordApplied(ctx context.Context, tx *sql.Tx, h store.Heartbeat) error {
	st := s.txStmt(ctx, tx, qAppliedRead)
	rows, err := st.QueryContext(ctx, h.Cluster)
	if err != nil {
		return fmt.Errorf("reading applied revisions of %s: %w", h.Cluster, err)
	}
	changed := map[string]int64{}
	for rows.Next() {
		var (
			bundle string
			rev    int64
		)
		if err := rows.Scan(&bundle, &rev); err != nil {
			rows.Close()
			return fmt.Errorf("reading applied revisions of %s: %w", h.Cluster, err)
		}
		if want := h.Applied[bundle]; want != rev {
			changed[bundle] = want
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading applied revisions of %s: %w", h.Cluster, err)
	}
	if len(changed) == 0 {
		return nil
	}
	up := s.txStmt(ctx, tx, qAppliedWrite)
	for bundle, rev := range changed {
		if _, err := up.ExecContext(ctx, rev, h.Cluster, bundle); err != nil {
			return fmt.Errorf("recording applied revision of %s/%s: %w", h.Cluster, bundle, err)
		}
	}
	return nil
}

// recordHistory adds the heartbeat's record unless the newest one is recent and differs from it
// in nothing but the item count (store.HistoryInterval). The common case — an agent reporting
// what it reported a moment ago — costs one indexed read and writes nothing; a new record also
// prunes the cluster's oldest beyond HistoryLimit.
func (s *Store) recordHistory(ctx context.Context, tx *sql.Tx, h store.Heartbeat) error {
	rec := h.Record
	rec.At = h.At
	st := s.txStmt(ctx, tx, qHistoryNewest)
	last, err := scanHeartbeat(st.QueryRowContext(ctx, h.Cluster))
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return fmt.Errorf("reading the heartbeat history of %s: %w", h.Cluster, err)
	case last.SameBesidesItems(rec) && rec.At.Sub(last.At) < store.HistoryInterval:
		return nil
	}
	ins := s.txStmt(ctx, tx, qHistoryInsert)
	if _, err := ins.ExecContext(ctx, h.Cluster, ms(rec.At), rec.AgentVersion, rec.AppliedDigest,
		rec.Inventories, rec.Items, rec.InventoriesNotReady, rec.SinkErrors, rec.State); err != nil {
		return fmt.Errorf("recording the heartbeat history of %s: %w", h.Cluster, err)
	}
	// Everything from the (HistoryLimit+1)-th newest row down; usually exactly one row.
	prune := s.txStmt(ctx, tx, qHistoryPrune)
	if _, err := prune.ExecContext(ctx, h.Cluster, h.Cluster, store.HistoryLimit); err != nil {
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
