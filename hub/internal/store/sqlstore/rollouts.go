package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"kollect.dev/hub/internal/store"
)

const rolloutCols = `id, bundle, from_revision, to_revision, strategy, phase, message, current_wave, waves,
	rollback_of, created_by, created_at, updated_at, finished_at, version`

func scanRollout(sc scanner) (store.Rollout, error) {
	var (
		r                          store.Rollout
		phase, waves               string
		created, updated, finished int64
	)
	if err := sc.Scan(&r.ID, &r.Bundle, &r.FromRevision, &r.ToRevision, &r.Strategy, &phase, &r.Message, &r.CurrentWave,
		&waves, &r.RollbackOf, &r.CreatedBy, &created, &updated, &finished, &r.Version); err != nil {
		return r, err
	}
	r.Phase = store.RolloutPhase(phase)
	r.CreatedAt, r.UpdatedAt, r.FinishedAt = fromMS(created), fromMS(updated), fromMS(finished)
	if err := json.Unmarshal([]byte(waves), &r.Waves); err != nil {
		return r, fmt.Errorf("rollout %d: decoding waves: %w", r.ID, err)
	}
	return r, nil
}

// rolloutRow is a rollout's column values, in rolloutCols order without the id.
func rolloutRow(r store.Rollout) ([]any, error) {
	waves, err := json.Marshal(r.Waves)
	if err != nil {
		return nil, fmt.Errorf("encoding waves: %w", err)
	}
	return []any{r.Bundle, r.FromRevision, r.ToRevision, r.Strategy, string(r.Phase), b2i(r.Phase.Active()), r.Message,
		r.CurrentWave, string(waves), r.RollbackOf, r.CreatedBy, ms(r.CreatedAt), ms(r.UpdatedAt), ms(r.FinishedAt),
		r.Version}, nil
}

// CreateRollout implements store.Store.
func (s *Store) CreateRollout(ctx context.Context, r store.Rollout, clusters []store.RolloutCluster, supersede *store.Rollout) (store.Rollout, error) {
	now := nowUTC()
	if r.CreatedAt.IsZero() {
		r.CreatedAt = now
	}
	r.UpdatedAt, r.Version = r.CreatedAt, 1
	if !r.Phase.Active() && r.FinishedAt.IsZero() {
		r.FinishedAt = r.UpdatedAt
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		// The epoch row lock serialises this with CreateRevision (see there).
		if err := s.bumpEpoch(ctx, tx); err != nil {
			return err
		}
		if supersede != nil {
			old := *supersede
			if err := s.saveRollout(ctx, tx, &old); err != nil {
				return err
			}
		}
		if r.Phase.Active() {
			if id, err := s.activeRollout(ctx, tx, r.Bundle); err != nil {
				return err
			} else if id != 0 {
				return &store.ActiveRolloutError{Bundle: r.Bundle, RolloutID: id}
			}
		}
		vals, err := rolloutRow(r)
		if err != nil {
			return err
		}
		err = tx.QueryRowContext(ctx, s.q(`INSERT INTO rollouts (bundle, from_revision, to_revision, strategy, phase,
			active, message, current_wave, waves, rollback_of, created_by, created_at, updated_at, finished_at, version)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`), vals...).Scan(&r.ID)
		if isUniqueViolation(err) {
			// Another replica won the race between the check above and this insert.
			return &store.ActiveRolloutError{Bundle: r.Bundle}
		}
		if err != nil {
			return fmt.Errorf("inserting rollout: %w", err)
		}
		return s.saveRolloutClusters(ctx, tx, r.ID, clusters)
	})
	if err != nil {
		return store.Rollout{}, fmt.Errorf("creating a rollout of bundle %s: %w", r.Bundle, err)
	}
	return r, nil
}

// saveRollout writes r over the stored row if the stored version is r.Version, and advances
// r.Version.
func (s *Store) saveRollout(ctx context.Context, tx *sql.Tx, r *store.Rollout) error {
	if r.UpdatedAt.IsZero() {
		r.UpdatedAt = nowUTC()
	}
	if !r.Phase.Active() && r.FinishedAt.IsZero() {
		r.FinishedAt = r.UpdatedAt
	}
	r.Version++
	vals, err := rolloutRow(*r)
	if err != nil {
		return err
	}
	// vals: bundle … version; the row is matched on id and the previous version.
	vals = append(vals[1:], r.ID, r.Version-1)
	res, err := tx.ExecContext(ctx, s.q(`UPDATE rollouts SET from_revision = ?, to_revision = ?, strategy = ?,
		phase = ?, active = ?, message = ?, current_wave = ?, waves = ?, rollback_of = ?, created_by = ?,
		created_at = ?, updated_at = ?, finished_at = ?, version = ? WHERE id = ? AND version = ?`), vals...)
	if isUniqueViolation(err) {
		return &store.ActiveRolloutError{Bundle: r.Bundle, RolloutID: r.ID}
	}
	if err != nil {
		return fmt.Errorf("saving rollout %d: %w", r.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		var exists int
		if err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM rollouts WHERE id = ?`), r.ID).Scan(&exists); err != nil {
			return fmt.Errorf("saving rollout %d: %w", r.ID, err)
		}
		if exists == 0 {
			return fmt.Errorf("rollout %d: %w", r.ID, store.ErrNotFound)
		}
		return fmt.Errorf("rollout %d version %d: %w", r.ID, r.Version-1, store.ErrStale)
	}
	return nil
}

func (s *Store) saveRolloutClusters(ctx context.Context, tx *sql.Tx, id int64, clusters []store.RolloutCluster) error {
	clusters = lastPerKey(clusters, func(c store.RolloutCluster) string { return c.Cluster })
	baselines := make([]string, len(clusters))
	for i, c := range clusters {
		baseline, err := json.Marshal(c.Baseline)
		if err != nil {
			return fmt.Errorf("encoding baseline of %s: %w", c.Cluster, err)
		}
		baselines[i] = string(baseline)
	}
	err := s.execValues(ctx, tx, `INSERT INTO rollout_clusters (rollout_id, cluster, wave, state, gate,
		message, moved_at, healthy_since, finished_at, baseline)`, `ON CONFLICT (rollout_id, cluster) DO UPDATE SET
		wave = excluded.wave, state = excluded.state, gate = excluded.gate, message = excluded.message,
		moved_at = excluded.moved_at, healthy_since = excluded.healthy_since, finished_at = excluded.finished_at,
		baseline = excluded.baseline`, 10, len(clusters), func(i int, dst []any) []any {
		c := clusters[i]
		return append(dst, id, c.Cluster, c.Wave, string(c.State), c.Gate, c.Message, ms(c.MovedAt), ms(c.HealthySince),
			ms(c.FinishedAt), baselines[i])
	})
	if err != nil {
		return fmt.Errorf("saving the clusters of rollout %d: %w", id, err)
	}
	return nil
}

// lastPerKey keeps, of the items with the same key, the last one, in the order of their last
// occurrence: what writing them one at a time would have left.
func lastPerKey[T any](items []T, key func(T) string) []T {
	last := make(map[string]int, len(items))
	for i, it := range items {
		last[key(it)] = i
	}
	if len(last) == len(items) {
		return items
	}
	out := make([]T, 0, len(last))
	for i, it := range items {
		if last[key(it)] == i {
			out = append(out, it)
		}
	}
	return out
}

// GetRollout implements store.Store.
func (s *Store) GetRollout(ctx context.Context, id int64) (store.Rollout, error) {
	r, err := scanRollout(s.db.QueryRowContext(ctx, s.q(`SELECT `+rolloutCols+` FROM rollouts WHERE id = ?`), id))
	if err != nil {
		return r, notFound(err, fmt.Sprintf("rollout %d", id))
	}
	return r, nil
}

// RolloutClusters implements store.Store.
func (s *Store) RolloutClusters(ctx context.Context, id int64) ([]store.RolloutCluster, error) {
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT cluster, wave, state, gate, message, moved_at, healthy_since,
		finished_at, baseline FROM rollout_clusters WHERE rollout_id = ? ORDER BY cluster`), id)
	if err != nil {
		return nil, fmt.Errorf("listing clusters of rollout %d: %w", id, err)
	}
	defer rows.Close()
	var out []store.RolloutCluster
	for rows.Next() {
		var (
			c                       store.RolloutCluster
			state, baseline         string
			moved, healthy, finshed int64
		)
		if err := rows.Scan(&c.Cluster, &c.Wave, &state, &c.Gate, &c.Message, &moved, &healthy, &finshed, &baseline); err != nil {
			return nil, fmt.Errorf("reading cluster of rollout %d: %w", id, err)
		}
		c.State = store.ClusterState(state)
		c.MovedAt, c.HealthySince, c.FinishedAt = fromMS(moved), fromMS(healthy), fromMS(finshed)
		if err := json.Unmarshal([]byte(baseline), &c.Baseline); err != nil {
			return nil, fmt.Errorf("rollout %d cluster %s: decoding baseline: %w", id, c.Cluster, err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing clusters of rollout %d: %w", id, err)
	}
	return out, nil
}

// ListRollouts implements store.Store.
func (s *Store) ListRollouts(ctx context.Context, f store.RolloutFilter) ([]store.Rollout, error) {
	query := `SELECT ` + rolloutCols + ` FROM rollouts WHERE 1 = 1`
	var args []any
	if f.Bundle != "" {
		query += ` AND bundle = ?`
		args = append(args, f.Bundle)
	}
	if f.ActiveOnly {
		query += ` AND active = 1`
	}
	query += ` ORDER BY id DESC`
	if f.Limit > 0 {
		query += ` LIMIT ?`
		args = append(args, f.Limit)
	}
	return queryAll(ctx, s.db, "rollouts", scanRollout, s.q(query), args...)
}

// ApplyRolloutStep implements store.Store.
func (s *Store) ApplyRolloutStep(ctx context.Context, step store.RolloutStep, match store.Matcher) (store.Rollout, error) {
	r := step.Rollout
	var prevPhase string
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if len(step.Move) > 0 || r.Phase == store.PhaseCompleted {
			if err := s.bumpEpoch(ctx, tx); err != nil {
				return err
			}
		}
		err := tx.QueryRowContext(ctx, s.q(`SELECT phase FROM rollouts WHERE id = ?`), r.ID).Scan(&prevPhase)
		if err != nil {
			return notFound(err, fmt.Sprintf("rollout %d", r.ID))
		}
		if err := s.saveRollout(ctx, tx, &r); err != nil {
			return err
		}
		for _, name := range step.Remove {
			if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM rollout_clusters WHERE rollout_id = ? AND cluster = ?`), r.ID, name); err != nil {
				return fmt.Errorf("removing %s from rollout %d: %w", name, r.ID, err)
			}
		}
		if err := s.saveRolloutClusters(ctx, tx, r.ID, step.Clusters); err != nil {
			return err
		}
		now := ms(r.UpdatedAt)
		if len(step.Move) > 0 {
			if err := s.move(ctx, tx, r, step.Move, now, match); err != nil {
				return err
			}
		}
		if r.Phase == store.PhaseCompleted && prevPhase != string(store.PhaseCompleted) {
			if err := s.release(ctx, tx, r, now, match); err != nil {
				return err
			}
		}
		for _, e := range step.Audit {
			if err := s.appendAudit(ctx, tx, e); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return store.Rollout{}, fmt.Errorf("rollout %d step: %w", r.ID, err)
	}
	return r, nil
}

// targetSelector reads the selector of a rollout's target revision.
func (s *Store) targetSelector(ctx context.Context, tx *sql.Tx, r store.Rollout) (string, error) {
	var sel string
	err := tx.QueryRowContext(ctx, s.q(`SELECT selector FROM bundle_revisions WHERE bundle = ? AND revision = ?`),
		r.Bundle, r.ToRevision).Scan(&sel)
	if err != nil {
		return "", notFound(err, fmt.Sprintf("bundle %s revision %d", r.Bundle, r.ToRevision))
	}
	return sel, nil
}

// move gives the named live clusters the rollout's target revision, or takes the bundle from
// those its selector does not match. Clusters gone from the fleet are skipped.
func (s *Store) move(ctx context.Context, tx *sql.Tx, r store.Rollout, clusters []string, now int64, match store.Matcher) error {
	sel, err := s.targetSelector(ctx, tx, r)
	if err != nil {
		return err
	}
	var matched, unmatched []string
	for _, name := range clusters {
		var raw string
		err := tx.QueryRowContext(ctx, s.q(`SELECT labels FROM clusters WHERE name = ? AND revoked = 0`), name).Scan(&raw)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading cluster %s: %w", name, err)
		}
		var labels map[string]string
		if err := json.Unmarshal([]byte(raw), &labels); err != nil {
			return fmt.Errorf("cluster %s labels: %w", name, err)
		}
		ok, err := match(sel, labels)
		if err != nil {
			return fmt.Errorf("matching cluster %s: %w", name, err)
		}
		if ok {
			matched = append(matched, name)
		} else {
			unmatched = append(unmatched, name)
		}
	}
	return s.assign(ctx, tx, r.Bundle, r.ToRevision, matched, unmatched, now)
}

// release makes a completed rollout's target the stable revision and assigns it to every live
// cluster outside the rollout, as CreateRevision would.
func (s *Store) release(ctx context.Context, tx *sql.Tx, r store.Rollout, now int64, match store.Matcher) error {
	if _, err := tx.ExecContext(ctx, s.q(`UPDATE bundles SET stable_revision = ? WHERE name = ? AND deleted = 0`),
		r.ToRevision, r.Bundle); err != nil {
		return fmt.Errorf("releasing %s@%d: %w", r.Bundle, r.ToRevision, err)
	}
	inRollout := map[string]bool{}
	rows, err := tx.QueryContext(ctx, s.q(`SELECT cluster FROM rollout_clusters WHERE rollout_id = ?`), r.ID)
	if err != nil {
		return fmt.Errorf("listing clusters of rollout %d: %w", r.ID, err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return fmt.Errorf("reading cluster of rollout %d: %w", r.ID, err)
		}
		inRollout[name] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("listing clusters of rollout %d: %w", r.ID, err)
	}
	sel, err := s.targetSelector(ctx, tx, r)
	if err != nil {
		return err
	}
	matched, unmatched, err := s.matchClusters(ctx, tx, sel, match, inRollout)
	if err != nil {
		return err
	}
	return s.assign(ctx, tx, r.Bundle, r.ToRevision, matched, unmatched, now)
}
