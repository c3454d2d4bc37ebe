package sqlstore

import (
	"context"
	"database/sql"
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
// write, so the common one reads the cluster's row and writes it back, and nothing else: the
// row keeps what the heartbeat must compare with (the newest history record's time and values,
// the applied digest its applied revisions were set from), so the applied revisions are read
// only when the agent's applied configuration changed or its desired bundles were rewritten,
// and the history is read never. A history record is added when recordHistory calls for one,
// and the history is pruned to its limit every pruneEvery records. Its statements are prepared
// once (prepared).
func (s *Store) RecordHeartbeat(ctx context.Context, h store.Heartbeat) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		var m heartbeatMarks
		var prev int64
		err := s.txStmt(ctx, tx, qHeartbeatPrevious).QueryRowContext(ctx, h.Cluster).
			Scan(&prev, &m.historyAt, &m.historyKey, &m.unpruned, &m.appliedChecked)
		if err != nil {
			return notFound(err, "recording heartbeat of "+h.Cluster)
		}
		if h.StateAt != nil {
			h.Record.State = h.StateAt(fromMS(prev))
		}
		checked := m.appliedChecked
		if m.appliedChecked != h.AppliedDigest {
			if err := s.recordApplied(ctx, tx, h); err != nil {
				return err
			}
			m.appliedChecked = h.AppliedDigest
		}
		if err := s.recordHistory(ctx, tx, h, &m); err != nil {
			return err
		}
		res, err := s.txStmt(ctx, tx, qHeartbeatCluster).ExecContext(ctx, ms(h.At), h.AgentVersion, h.KubernetesVersion,
			h.AppliedDigest, h.Status, m.historyAt, m.historyKey, m.unpruned, checked, m.appliedChecked, h.Cluster)
		if err != nil {
			return fmt.Errorf("recording heartbeat of %s: %w", h.Cluster, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("recording heartbeat of %s: %w", h.Cluster, store.ErrNotFound)
		}
		return nil
	})
}

// heartbeatMarks are the columns of a cluster's row a heartbeat compares with (migration 0009).
type heartbeatMarks struct {
	historyAt      int64
	historyKey     string
	unpruned       int64
	appliedChecked string
}

// appliedUnchecked marks a cluster whose desired bundles were rewritten: its next heartbeat
// sets the applied revisions whatever digest it reports. The heartbeat writes its digest over
// the mark only if the mark is still what it read: a bundle written on another connection
// between the heartbeat's read and its write (PostgreSQL re-reads the row for the update)
// keeps the mark for the next heartbeat.
const appliedUnchecked = "!"

// pruneEvery is how many history records a cluster adds between two prunes to HistoryLimit:
// the table holds at most HistoryLimit+pruneEvery-1 of a cluster's records, and Heartbeats
// never answers more than HistoryLimit.
const pruneEvery = 16

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
// in nothing but the item count (store.HistoryInterval), as m, the cluster's marks, tell; it
// updates m for the cluster's row. Every pruneEvery records it prunes the cluster's oldest
// beyond HistoryLimit.
func (s *Store) recordHistory(ctx context.Context, tx *sql.Tx, h store.Heartbeat, m *heartbeatMarks) error {
	rec := h.Record
	rec.At = h.At
	key := historyKey(rec)
	if key == m.historyKey && rec.At.Sub(fromMS(m.historyAt)) < store.HistoryInterval {
		return nil
	}
	ins := s.txStmt(ctx, tx, qHistoryInsert)
	if _, err := ins.ExecContext(ctx, h.Cluster, ms(rec.At), rec.AgentVersion, rec.AppliedDigest,
		rec.Inventories, rec.Items, rec.InventoriesNotReady, rec.SinkErrors, rec.State); err != nil {
		return fmt.Errorf("recording the heartbeat history of %s: %w", h.Cluster, err)
	}
	m.historyAt, m.historyKey, m.unpruned = ms(rec.At), key, m.unpruned+1
	if m.unpruned < pruneEvery {
		return nil
	}
	// Everything from the (HistoryLimit+1)-th newest row down.
	prune := s.txStmt(ctx, tx, qHistoryPrune)
	if _, err := prune.ExecContext(ctx, h.Cluster, h.Cluster, store.HistoryLimit); err != nil {
		return fmt.Errorf("pruning the heartbeat history of %s: %w", h.Cluster, err)
	}
	m.unpruned = 0
	return nil
}

// historyKey is a record's values besides its time and item count (SameBesidesItems), as the
// cluster's row keeps them for the newest record.
func historyKey(r store.HeartbeatRecord) string {
	return fmt.Sprintf("%q %q %d %d %d %q", r.AgentVersion, r.AppliedDigest, r.Inventories, r.InventoriesNotReady,
		r.SinkErrors, r.State)
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
		FROM cluster_heartbeats WHERE cluster = ? ORDER BY id DESC LIMIT ?`), cluster, min(limit, store.HistoryLimit))
}
