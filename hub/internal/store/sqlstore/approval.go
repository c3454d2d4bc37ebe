package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"kollect.dev/hub/internal/store"
)

// clusterIn reads a cluster in tx (store.ErrNotFound when there is none).
func (s *Store) clusterIn(ctx context.Context, tx *sql.Tx, name string) (store.Cluster, error) {
	c, err := scanCluster(tx.QueryRowContext(ctx, s.q(`SELECT `+clusterCols+` FROM clusters WHERE name = ?`), name))
	if err != nil {
		return c, notFound(err, "cluster "+name)
	}
	return c, nil
}

// ApproveCluster implements store.Store.
func (s *Store) ApproveCluster(ctx context.Context, d store.Decision, match store.Matcher) (store.Cluster, error) {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		// Both epochs: the cluster's configuration appears (the dispatcher sends it), and it
		// joins the fleet the rollout engine and the replicas' caches see.
		if err := s.bumpEpoch(ctx, tx); err != nil {
			return err
		}
		if err := s.bumpClusterEpoch(ctx, tx); err != nil {
			return err
		}
		c, err := s.clusterIn(ctx, tx, d.Cluster)
		if err != nil {
			return err
		}
		if c.Revoked || c.Approval != store.ApprovalPending {
			return fmt.Errorf("cluster %s is %s, not pending approval: %w", d.Cluster, approvalState(c), store.ErrConflict)
		}
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE clusters SET approval = 'approved', approval_by = ?, approval_at = ?
			WHERE name = ?`), d.By, ms(d.At), d.Cluster); err != nil {
			return fmt.Errorf("approving cluster %s: %w", d.Cluster, err)
		}
		// Selected afresh, as at registration: while it waited, rollouts it had no part in
		// may have moved the stable revisions past the ones it was given.
		return s.assignBundles(ctx, tx, d.Cluster, c.Labels, ms(d.At), match, false)
	})
	if err != nil {
		return store.Cluster{}, fmt.Errorf("approving cluster %s: %w", d.Cluster, err)
	}
	return s.GetCluster(ctx, d.Cluster)
}

// RejectCluster implements store.Store.
func (s *Store) RejectCluster(ctx context.Context, d store.Decision) (store.Cluster, error) {
	var before store.Cluster
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		if before, err = s.clusterIn(ctx, tx, d.Cluster); err != nil {
			return err
		}
		if before.Revoked {
			return fmt.Errorf("cluster %s is already revoked: %w", d.Cluster, store.ErrConflict)
		}
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE clusters SET approval = 'rejected', approval_by = ?, approval_at = ?
			WHERE name = ?`), d.By, ms(d.At), d.Cluster); err != nil {
			return fmt.Errorf("rejecting cluster %s: %w", d.Cluster, err)
		}
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO rejected_registrations (cluster, bootstrap_hash, rejected_at)
			VALUES (?, ?, ?) ON CONFLICT DO NOTHING`), d.Cluster, before.BootstrapHash, ms(d.At)); err != nil {
			return fmt.Errorf("recording the rejection of %s: %w", d.Cluster, err)
		}
		return s.revokeCluster(ctx, tx, d.Cluster)
	})
	if err != nil {
		return store.Cluster{}, fmt.Errorf("rejecting cluster %s: %w", d.Cluster, err)
	}
	return before, nil
}

// checkRejected refuses, with store.ErrRegistrationRejected, a registration of name with the
// token of this hash after an admin rejected one.
func (s *Store) checkRejected(ctx context.Context, q querier, name, hash string) error {
	var n int
	err := q.QueryRowContext(ctx, s.q(`SELECT count(*) FROM rejected_registrations WHERE cluster = ? AND bootstrap_hash = ?`),
		name, hash).Scan(&n)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("checking for a rejected registration of %s: %w", name, err)
	}
	if n > 0 {
		return fmt.Errorf("cluster %s: %w", name, store.ErrRegistrationRejected)
	}
	return nil
}

// approvalState names a cluster's standing for an error message.
func approvalState(c store.Cluster) string {
	switch {
	case c.Approval == store.ApprovalRejected:
		return "rejected"
	case c.Revoked:
		return "revoked"
	}
	return string(c.Approval)
}
