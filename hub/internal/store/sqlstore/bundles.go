package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"kollect.dev/hub/internal/store"
)

const revisionCols = `bundle, revision, manifests, selector, digest, objects, created_by, created_at, message`

func scanRevision(sc scanner) (store.Revision, error) {
	var (
		r       store.Revision
		created int64
	)
	if err := sc.Scan(&r.Bundle, &r.Revision, &r.Manifests, &r.Selector, &r.Digest, &r.Objects, &r.CreatedBy,
		&created, &r.Message); err != nil {
		return r, err
	}
	r.CreatedAt = fromMS(created)
	return r, nil
}

// CreateRevision implements store.Store.
func (s *Store) CreateRevision(ctx context.Context, rev store.Revision, description string, hold bool, match store.Matcher) (store.Revision, bool, []string, error) {
	var (
		out      store.Revision
		created  bool
		selected []string
	)
	now := ms(rev.CreatedAt)
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := s.bumpEpoch(ctx, tx); err != nil {
			return err
		}
		if !hold {
			// Checked under the epoch lock that CreateRollout also takes, so a rollout and
			// an immediate release of the same bundle cannot both happen.
			if id, err := s.activeRollout(ctx, tx, rev.Bundle); err != nil {
				return err
			} else if id != 0 {
				return &store.ActiveRolloutError{Bundle: rev.Bundle, RolloutID: id}
			}
		}
		var latest, deleted int64
		err := tx.QueryRowContext(ctx, s.q(`SELECT latest_revision, deleted FROM bundles WHERE name = ?`), rev.Bundle).
			Scan(&latest, &deleted)
		exists := err == nil
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("reading bundle: %w", err)
		}
		if exists && deleted == 0 {
			prev, err := scanRevision(tx.QueryRowContext(ctx, s.q(`SELECT `+revisionCols+` FROM bundle_revisions
				WHERE bundle = ? AND revision = ?`), rev.Bundle, latest))
			if err != nil {
				return fmt.Errorf("reading latest revision: %w", err)
			}
			if prev.Digest == rev.Digest {
				out = prev
			}
		}
		if out.Revision == 0 {
			created = true
			out = rev
			out.Revision = latest + 1
			switch {
			case exists && deleted != 0:
				// A re-created bundle starts unreleased; its old stable revision is history.
				_, err = tx.ExecContext(ctx, s.q(`UPDATE bundles SET description = ?, latest_revision = ?, selector = ?,
					deleted = 0, stable_revision = 0, updated_at = ? WHERE name = ?`), description, out.Revision, rev.Selector, now, rev.Bundle)
			case exists:
				_, err = tx.ExecContext(ctx, s.q(`UPDATE bundles SET description = ?, latest_revision = ?, selector = ?,
					updated_at = ? WHERE name = ?`), description, out.Revision, rev.Selector, now, rev.Bundle)
			default:
				_, err = tx.ExecContext(ctx, s.q(`INSERT INTO bundles (name, description, latest_revision, selector,
					deleted, stable_revision, created_at, updated_at) VALUES (?, ?, ?, ?, 0, 0, ?, ?)`),
					rev.Bundle, description, out.Revision, rev.Selector, now, now)
			}
			if err != nil {
				return fmt.Errorf("updating bundle: %w", err)
			}
			if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO bundle_revisions (`+revisionCols+`)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`), out.Bundle, out.Revision, out.Manifests, out.Selector,
				out.Digest, out.Objects, out.CreatedBy, now, out.Message); err != nil {
				return fmt.Errorf("inserting revision %d: %w", out.Revision, err)
			}
		}
		matched, unmatched, err := s.matchClusters(ctx, tx, out.Selector, match, nil)
		if err != nil {
			return err
		}
		selected = matched
		if hold {
			return nil
		}
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE bundles SET stable_revision = ? WHERE name = ?`), out.Revision, out.Bundle); err != nil {
			return fmt.Errorf("releasing revision %d: %w", out.Revision, err)
		}
		return s.assign(ctx, tx, out.Bundle, out.Revision, matched, unmatched, now)
	})
	if err != nil {
		return store.Revision{}, false, nil, fmt.Errorf("creating revision of bundle %s: %w", rev.Bundle, err)
	}
	return out, created, selected, nil
}

// matchClusters splits the live clusters (except those in skip) into those the selector
// matches and the others, both sorted by name. A cluster pending approval is neither: it is
// given its bundles when approved (ApproveCluster), and counts among no bundle's clusters
// meanwhile.
func (s *Store) matchClusters(ctx context.Context, tx *sql.Tx, selector string, match store.Matcher, skip map[string]bool) (matched, unmatched []string, err error) {
	rows, err := tx.QueryContext(ctx, `SELECT name, labels FROM clusters WHERE revoked = 0 AND approval = 'approved' ORDER BY name`)
	if err != nil {
		return nil, nil, fmt.Errorf("listing clusters: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name, raw string
		if err := rows.Scan(&name, &raw); err != nil {
			return nil, nil, fmt.Errorf("reading cluster: %w", err)
		}
		if skip[name] {
			continue
		}
		var labels map[string]string
		if err := json.Unmarshal([]byte(raw), &labels); err != nil {
			return nil, nil, fmt.Errorf("cluster %s labels: %w", name, err)
		}
		ok, err := match(selector, labels)
		if err != nil {
			return nil, nil, fmt.Errorf("matching cluster %s: %w", name, err)
		}
		if ok {
			matched = append(matched, name)
		} else {
			unmatched = append(unmatched, name)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("listing clusters: %w", err)
	}
	return matched, unmatched, nil
}

// assign makes revision the desired revision of bundle on the matched clusters and takes the
// bundle from the unmatched ones.
func (s *Store) assign(ctx context.Context, tx *sql.Tx, bundle string, revision int64, matched, unmatched []string, now int64) error {
	if err := s.setDesired(ctx, tx, bundle, revision, matched, now); err != nil {
		return err
	}
	for _, name := range unmatched {
		if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM cluster_bundles WHERE cluster = ? AND bundle = ?`), name, bundle); err != nil {
			return fmt.Errorf("unassigning %s from %s: %w", bundle, name, err)
		}
	}
	return nil
}

// activeRollout returns the id of the bundle's active rollout, 0 when none.
func (s *Store) activeRollout(ctx context.Context, tx querier, bundle string) (int64, error) {
	var id int64
	err := tx.QueryRowContext(ctx, s.q(`SELECT id FROM rollouts WHERE bundle = ? AND active = 1`), bundle).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading active rollout of %s: %w", bundle, err)
	}
	return id, nil
}

func (s *Store) setDesired(ctx context.Context, tx *sql.Tx, bundle string, revision int64, clusters []string, now int64) error {
	clusters = lastPerKey(clusters, func(c string) string { return c })
	err := s.execValues(ctx, tx, `INSERT INTO cluster_bundles (cluster, bundle, desired_revision, updated_at)`,
		`ON CONFLICT (cluster, bundle) DO UPDATE SET desired_revision = excluded.desired_revision, updated_at = excluded.updated_at`,
		4, len(clusters), func(i int, dst []any) []any { return append(dst, clusters[i], bundle, revision, now) })
	if err != nil {
		return fmt.Errorf("setting desired revision %d of %s on %d clusters: %w", revision, bundle, len(clusters), err)
	}
	return s.uncheckApplied(ctx, tx, clusters)
}

// uncheckApplied makes the next heartbeat of each cluster set its applied revisions whatever
// digest it reports (RecordHeartbeat): a desired bundle row written anew starts at applied
// revision 0, which the agent's unchanged digest would otherwise leave so.
func (s *Store) uncheckApplied(ctx context.Context, tx *sql.Tx, clusters []string) error {
	const chunk = 500 // well under SQLite's limit of bound parameters
	for len(clusters) > 0 {
		n := min(chunk, len(clusters))
		args := make([]any, 0, n+1)
		args = append(args, appliedUnchecked)
		for _, c := range clusters[:n] {
			args = append(args, c)
		}
		q := `UPDATE clusters SET applied_checked = ? WHERE name IN (?` + strings.Repeat(", ?", n-1) + `)`
		if _, err := tx.ExecContext(ctx, s.q(q), args...); err != nil {
			return fmt.Errorf("marking the applied revisions of %d clusters for the next heartbeat: %w", n, err)
		}
		clusters = clusters[n:]
	}
	return nil
}

// SetDesiredRevision implements store.Store.
func (s *Store) SetDesiredRevision(ctx context.Context, bundle string, revision int64, clusters []string) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if err := s.bumpEpoch(ctx, tx); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM bundle_revisions WHERE bundle = ? AND revision = ?`),
			bundle, revision).Scan(&n); err != nil {
			return fmt.Errorf("checking revision: %w", err)
		}
		if n == 0 {
			return fmt.Errorf("bundle %s revision %d: %w", bundle, revision, store.ErrNotFound)
		}
		return s.setDesired(ctx, tx, bundle, revision, clusters, ms(nowUTC()))
	})
}

// DeleteBundle implements store.Store.
func (s *Store) DeleteBundle(ctx context.Context, name string) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if err := s.bumpEpoch(ctx, tx); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, s.q(`UPDATE bundles SET deleted = 1, updated_at = ? WHERE name = ? AND deleted = 0`),
			ms(nowUTC()), name)
		if err != nil {
			return fmt.Errorf("deleting bundle %s: %w", name, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("deleting bundle %s: %w", name, store.ErrNotFound)
		}
		if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM cluster_bundles WHERE bundle = ?`), name); err != nil {
			return fmt.Errorf("unassigning bundle %s: %w", name, err)
		}
		now := ms(nowUTC())
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE rollouts SET phase = ?, active = 0, message = ?, updated_at = ?,
			finished_at = ?, version = version + 1 WHERE bundle = ? AND active = 1`),
			string(store.PhaseAborted), "aborted: the bundle was deleted", now, now, name); err != nil {
			return fmt.Errorf("aborting the rollout of bundle %s: %w", name, err)
		}
		return nil
	})
}

// bundleQuery reads bundles with their active rollout (at most one, by the unique index).
const bundleQuery = `SELECT b.name, b.description, b.latest_revision, b.selector, b.stable_revision,
	COALESCE(r.id, 0), b.created_at, b.updated_at
	FROM bundles b LEFT JOIN rollouts r ON r.bundle = b.name AND r.active = 1`

func scanBundle(sc scanner) (store.Bundle, error) {
	var (
		b                store.Bundle
		created, updated int64
	)
	if err := sc.Scan(&b.Name, &b.Description, &b.LatestRevision, &b.Selector, &b.StableRevision, &b.ActiveRolloutID,
		&created, &updated); err != nil {
		return b, err
	}
	b.CreatedAt, b.UpdatedAt = fromMS(created), fromMS(updated)
	return b, nil
}

// ListBundles implements store.Store.
func (s *Store) ListBundles(ctx context.Context) ([]store.Bundle, error) {
	return queryAll(ctx, s.db, "bundles", scanBundle, bundleQuery+` WHERE b.deleted = 0 ORDER BY b.name`)
}

// GetBundle implements store.Store.
func (s *Store) GetBundle(ctx context.Context, name string) (store.Bundle, error) {
	b, err := scanBundle(s.db.QueryRowContext(ctx, s.q(bundleQuery+` WHERE b.name = ? AND b.deleted = 0`), name))
	if err != nil {
		return b, notFound(err, "bundle "+name)
	}
	return b, nil
}

// GetRevision implements store.Store.
func (s *Store) GetRevision(ctx context.Context, bundle string, revision int64) (store.Revision, error) {
	var row *sql.Row
	if revision == 0 {
		row = s.db.QueryRowContext(ctx, s.q(`SELECT `+revisionCols+` FROM bundle_revisions
			WHERE bundle = ? ORDER BY revision DESC LIMIT 1`), bundle)
	} else {
		row = s.db.QueryRowContext(ctx, s.q(`SELECT `+revisionCols+` FROM bundle_revisions
			WHERE bundle = ? AND revision = ?`), bundle, revision)
	}
	r, err := scanRevision(row)
	if err != nil {
		return r, notFound(err, fmt.Sprintf("bundle %s revision %d", bundle, revision))
	}
	return r, nil
}

// ListRevisions implements store.Store.
func (s *Store) ListRevisions(ctx context.Context, bundle string) ([]store.Revision, error) {
	out, err := queryAll(ctx, s.db, "revisions of "+bundle, scanRevision, s.q(`SELECT bundle, revision, '', selector,
		digest, objects, created_by, created_at, message FROM bundle_revisions WHERE bundle = ? ORDER BY revision DESC`), bundle)
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("bundle %s: %w", bundle, store.ErrNotFound)
	}
	return out, nil
}

// Desired implements store.Store.
func (s *Store) Desired(ctx context.Context, cluster string) ([]store.Desired, error) {
	// A cluster pending approval may hold rows (chosen at registration, or by a relabelling):
	// they stay hidden, so that nothing built from them — its configuration, the fleet view —
	// reaches it or counts it before an admin approves it.
	query := `SELECT cb.cluster, cb.bundle, cb.desired_revision, cb.applied_revision FROM cluster_bundles cb
		JOIN clusters c ON c.name = cb.cluster WHERE c.approval = 'approved'`
	var args []any
	if cluster != "" {
		query += ` AND cb.cluster = ?`
		args = append(args, cluster)
	}
	rows, err := s.db.QueryContext(ctx, s.q(query+` ORDER BY cb.cluster, cb.bundle`), args...)
	if err != nil {
		return nil, fmt.Errorf("listing desired revisions: %w", err)
	}
	defer rows.Close()
	var out []store.Desired
	for rows.Next() {
		var d store.Desired
		if err := rows.Scan(&d.Cluster, &d.Bundle, &d.Revision, &d.AppliedRevision); err != nil {
			return nil, fmt.Errorf("reading desired revision: %w", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing desired revisions: %w", err)
	}
	return out, nil
}
