package sqlstore

import (
	"context"
	"fmt"
)

// bumpClusterEpoch moves the cluster epoch in tx; every transaction that changes a cluster's
// registration calls it. On SQLite the store's one process also counts in memory, so that
// ClusterEpoch, asked on every agent call, reads no database: the single connection
// serialises every read behind this transaction, so no reader can see the new epoch with the
// old registration.
func (s *Store) bumpClusterEpoch(ctx context.Context, tx querier) error {
	if _, err := tx.ExecContext(ctx, s.q(`UPDATE hub_state SET value = value + 1 WHERE key = 'cluster_epoch'`)); err != nil {
		return fmt.Errorf("bumping cluster epoch: %w", err)
	}
	if s.d.name == sqliteDialect.name {
		s.clusterEpoch.Add(1)
	}
	return nil
}

// ClusterEpoch implements store.Store. On PostgreSQL it reads the shared value (one indexed
// row), so a change committed by another replica is seen by the next call.
func (s *Store) ClusterEpoch(ctx context.Context) (int64, error) {
	if s.d.name == sqliteDialect.name {
		return s.clusterEpoch.Load(), nil
	}
	return s.readClusterEpoch(ctx)
}

func (s *Store) readClusterEpoch(ctx context.Context) (int64, error) {
	var v int64
	if err := s.stmt(qClusterEpoch).QueryRowContext(ctx).Scan(&v); err != nil {
		return 0, fmt.Errorf("reading cluster epoch: %w", err)
	}
	return v, nil
}
