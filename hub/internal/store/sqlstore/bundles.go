package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"kollect.dev/hub/internal/store"
)

const revisionCols = `bundle, revision, manifests, selector, digest, objects, created_by, created_at, message`

func scanRevision(sc interface{ Scan(...any) error }) (store.Revision, error) {
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
func (s *Store) CreateRevision(ctx context.Context, rev store.Revision, description string, match store.Matcher) (store.Revision, bool, []string, error) {
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
			if exists {
				_, err = tx.ExecContext(ctx, s.q(`UPDATE bundles SET description = ?, latest_revision = ?, selector = ?,
					deleted = 0, updated_at = ? WHERE name = ?`), description, out.Revision, rev.Selector, now, rev.Bundle)
			} else {
				_, err = tx.ExecContext(ctx, s.q(`INSERT INTO bundles (name, description, latest_revision, selector,
					deleted, created_at, updated_at) VALUES (?, ?, ?, ?, 0, ?, ?)`),
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
		selected, err = s.assignRevision(ctx, tx, out, now, match)
		return err
	})
	if err != nil {
		return store.Revision{}, false, nil, fmt.Errorf("creating revision of bundle %s: %w", rev.Bundle, err)
	}
	return out, created, selected, nil
}

// assignRevision makes rev the desired revision of every live cluster its selector matches and
// removes the bundle from the clusters it no longer matches.
func (s *Store) assignRevision(ctx context.Context, tx *sql.Tx, rev store.Revision, now int64, match store.Matcher) ([]string, error) {
	rows, err := tx.QueryContext(ctx, `SELECT name, labels FROM clusters WHERE revoked = 0 ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("listing clusters: %w", err)
	}
	var selected, unselected []string
	for rows.Next() {
		var name, raw string
		if err := rows.Scan(&name, &raw); err != nil {
			rows.Close()
			return nil, fmt.Errorf("reading cluster: %w", err)
		}
		var labels map[string]string
		if err := json.Unmarshal([]byte(raw), &labels); err != nil {
			rows.Close()
			return nil, fmt.Errorf("cluster %s labels: %w", name, err)
		}
		ok, err := match(rev.Selector, labels)
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("matching cluster %s: %w", name, err)
		}
		if ok {
			selected = append(selected, name)
		} else {
			unselected = append(unselected, name)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing clusters: %w", err)
	}
	if err := s.setDesired(ctx, tx, rev.Bundle, rev.Revision, selected, now); err != nil {
		return nil, err
	}
	for _, name := range unselected {
		if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM cluster_bundles WHERE cluster = ? AND bundle = ?`), name, rev.Bundle); err != nil {
			return nil, fmt.Errorf("unassigning %s from %s: %w", rev.Bundle, name, err)
		}
	}
	return selected, nil
}

func (s *Store) setDesired(ctx context.Context, tx *sql.Tx, bundle string, revision int64, clusters []string, now int64) error {
	for _, name := range clusters {
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO cluster_bundles (cluster, bundle, desired_revision, updated_at)
			VALUES (?, ?, ?, ?) ON CONFLICT (cluster, bundle) DO UPDATE
			SET desired_revision = excluded.desired_revision, updated_at = excluded.updated_at`),
			name, bundle, revision, now); err != nil {
			return fmt.Errorf("setting desired revision of %s on %s: %w", bundle, name, err)
		}
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
		return nil
	})
}

const bundleCols = `name, description, latest_revision, selector, created_at, updated_at`

func scanBundle(sc interface{ Scan(...any) error }) (store.Bundle, error) {
	var (
		b                store.Bundle
		created, updated int64
	)
	if err := sc.Scan(&b.Name, &b.Description, &b.LatestRevision, &b.Selector, &created, &updated); err != nil {
		return b, err
	}
	b.CreatedAt, b.UpdatedAt = fromMS(created), fromMS(updated)
	return b, nil
}

// ListBundles implements store.Store.
func (s *Store) ListBundles(ctx context.Context) ([]store.Bundle, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+bundleCols+` FROM bundles WHERE deleted = 0 ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("listing bundles: %w", err)
	}
	defer rows.Close()
	var out []store.Bundle
	for rows.Next() {
		b, err := scanBundle(rows)
		if err != nil {
			return nil, fmt.Errorf("reading bundle: %w", err)
		}
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing bundles: %w", err)
	}
	return out, nil
}

// GetBundle implements store.Store.
func (s *Store) GetBundle(ctx context.Context, name string) (store.Bundle, error) {
	b, err := scanBundle(s.db.QueryRowContext(ctx, s.q(`SELECT `+bundleCols+` FROM bundles WHERE name = ? AND deleted = 0`), name))
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
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT bundle, revision, '', selector, digest, objects, created_by,
		created_at, message FROM bundle_revisions WHERE bundle = ? ORDER BY revision DESC`), bundle)
	if err != nil {
		return nil, fmt.Errorf("listing revisions of %s: %w", bundle, err)
	}
	defer rows.Close()
	var out []store.Revision
	for rows.Next() {
		r, err := scanRevision(rows)
		if err != nil {
			return nil, fmt.Errorf("reading revision: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing revisions of %s: %w", bundle, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("bundle %s: %w", bundle, store.ErrNotFound)
	}
	return out, nil
}

// Desired implements store.Store.
func (s *Store) Desired(ctx context.Context, cluster string) ([]store.Desired, error) {
	query := `SELECT cluster, bundle, desired_revision, applied_revision FROM cluster_bundles`
	var args []any
	if cluster != "" {
		query += ` WHERE cluster = ?`
		args = append(args, cluster)
	}
	rows, err := s.db.QueryContext(ctx, s.q(query+` ORDER BY cluster, bundle`), args...)
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
