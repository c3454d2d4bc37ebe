package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"kollect.dev/hub/internal/store"
)

const clusterCols = `name, labels, credential_hash, revoked, released, bootstrap_hash, agent_version,
	kubernetes_version, registered_at, last_heartbeat, applied_digest, status, credential_expires_at,
	previous_credential_hash, previous_expires_at, approval, registration, approval_by, approval_at`

func scanCluster(sc scanner) (store.Cluster, error) {
	var (
		c                        store.Cluster
		labels                   string
		rev, rel, reg, heartbeat int64
		credExp, prevExp         int64
		registration             string
		decided                  int64
	)
	if err := sc.Scan(&c.Name, &labels, &c.CredentialHash, &rev, &rel, &c.BootstrapHash, &c.AgentVersion, &c.KubernetesVersion,
		&reg, &heartbeat, &c.AppliedDigest, &c.Status, &credExp, &c.PreviousCredentialHash, &prevExp,
		&c.Approval, &registration, &c.DecidedBy, &decided); err != nil {
		return c, err
	}
	if err := json.Unmarshal([]byte(labels), &c.Labels); err != nil {
		return c, fmt.Errorf("cluster %s: decoding labels: %w", c.Name, err)
	}
	if registration != "" {
		if err := json.Unmarshal([]byte(registration), &c.Registration); err != nil {
			return c, fmt.Errorf("cluster %s: decoding registration: %w", c.Name, err)
		}
	}
	c.Revoked, c.Released, c.RegisteredAt, c.LastHeartbeat = rev != 0, rel != 0, fromMS(reg), fromMS(heartbeat)
	c.CredentialExpiresAt, c.PreviousExpiresAt, c.DecidedAt = fromMS(credExp), fromMS(prevExp), fromMS(decided)
	return c, nil
}

// RegisterCluster implements store.Store.
func (s *Store) RegisterCluster(ctx context.Context, p store.RegisterParams, match store.Matcher) (store.Cluster, error) {
	labels, err := json.Marshal(p.Labels)
	if err != nil {
		return store.Cluster{}, fmt.Errorf("encoding labels: %w", err)
	}
	now := ms(p.Now)
	retried := false
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		if err := s.bumpEpoch(ctx, tx); err != nil {
			return err
		}
		if err := s.bumpClusterEpoch(ctx, tx); err != nil {
			return err
		}
		existing, err := scanCluster(tx.QueryRowContext(ctx, s.q(`SELECT `+clusterCols+` FROM clusters WHERE name = ?`), p.Name))
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("reading cluster %s: %w", p.Name, err)
		}
		missing := errors.Is(err, sql.ErrNoRows)
		// A token bound to a name and labels registers nothing else, a retry included.
		if err := s.checkBinding(ctx, tx, p.TokenHash, p.Name, p.Labels); err != nil {
			return err
		}
		// Nor does a token whose registration of this name an admin rejected: whoever holds it
		// would otherwise be back as soon as the name is released or deleted.
		if err := s.checkRejected(ctx, tx, p.Name, p.TokenHash); err != nil {
			return err
		}
		if !missing && !p.RetrySince.IsZero() {
			ok, err := s.retryable(ctx, tx, p.Name, p.TokenHash, p.KeyHash, p.RetrySince)
			if err != nil {
				return err
			}
			if ok {
				// The agent never used the credential it was given (it could not store it):
				// give it a new one for the same registration, without taking another use.
				retried = true
				_, err = tx.ExecContext(ctx, s.q(`UPDATE clusters SET labels = ?, credential_hash = ?, agent_version = ?,
					kubernetes_version = ?, credential_expires_at = ?, credential_used = 0 WHERE name = ?`), string(labels), p.CredentialHash,
					p.AgentVersion, p.KubernetesVersion, ms(p.CredentialExpiresAt), p.Name)
				if err != nil {
					return fmt.Errorf("completing the registration of %s again: %w", p.Name, err)
				}
				return s.assignBundles(ctx, tx, p.Name, p.Labels, now, match, false)
			}
		}
		tok, err := s.consumeBootstrapToken(ctx, tx, p.TokenHash, now)
		if err != nil {
			return err
		}
		approval := store.ApprovalApproved
		if p.RequireApproval || tok.RequireApproval {
			approval = store.ApprovalPending
		}
		registration, err := json.Marshal(store.Registration{TokenID: tok.ID, TokenDescription: tok.Description,
			TokenCreatedBy: tok.CreatedBy, Peer: p.Peer, AgentVersion: p.AgentVersion})
		if err != nil {
			return fmt.Errorf("encoding the registration of %s: %w", p.Name, err)
		}
		switch {
		case missing:
			_, err = tx.ExecContext(ctx, s.q(`INSERT INTO clusters (name, labels, credential_hash, revoked,
				bootstrap_hash, agent_version, kubernetes_version, registered_at, credential_expires_at, registration_key_hash,
				approval, registration)
				VALUES (?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?)`),
				p.Name, string(labels), p.CredentialHash, p.TokenHash, p.AgentVersion, p.KubernetesVersion, now,
				ms(p.CredentialExpiresAt), p.KeyHash, string(approval), string(registration))
			if err != nil {
				return fmt.Errorf("inserting cluster %s: %w", p.Name, err)
			}
		default:
			// A revoked cluster's name stays blocked until an admin releases it, so a revoked
			// agent (or whoever holds a token) cannot come straight back under it; a live
			// one only moves to a new agent when both the token and the request say so.
			if existing.Revoked && !existing.Released {
				return fmt.Errorf("cluster %s: %w", p.Name, store.ErrClusterRevoked)
			}
			if !existing.Revoked && !(p.Replace && tok.AllowReplace) {
				return fmt.Errorf("cluster %s: %w", p.Name, store.ErrClusterExists)
			}
			_, err = tx.ExecContext(ctx, s.q(`UPDATE clusters SET labels = ?, credential_hash = ?, revoked = 0, released = 0,
				bootstrap_hash = ?, agent_version = ?, kubernetes_version = ?, registered_at = ?, last_heartbeat = 0,
				applied_digest = '', status = '', credential_expires_at = ?, previous_credential_hash = '',
				previous_expires_at = 0, credential_used = 0, registration_key_hash = ?, approval = ?, registration = ?,
				approval_by = '', approval_at = 0 WHERE name = ?`),
				string(labels), p.CredentialHash, p.TokenHash, p.AgentVersion, p.KubernetesVersion, now,
				ms(p.CredentialExpiresAt), p.KeyHash, string(approval), string(registration), p.Name)
			if err != nil {
				return fmt.Errorf("replacing cluster %s: %w", p.Name, err)
			}
		}
		return s.assignBundles(ctx, tx, p.Name, p.Labels, now, match, false)
	})
	if err != nil {
		return store.Cluster{}, fmt.Errorf("registering cluster %s: %w", p.Name, err)
	}
	c, err := s.GetCluster(ctx, p.Name)
	c.Retried = retried
	return c, err
}

// retryable is RegistrationRetryable on q (the database, or a registration's transaction).
func (s *Store) retryable(ctx context.Context, q querier, cluster, hash, keyHash string, since time.Time) (bool, error) {
	if keyHash == "" {
		return false, nil // a registration without a key cannot be told from another holder's
	}
	var n int
	err := q.QueryRowContext(ctx, s.q(`SELECT count(*) FROM clusters c JOIN bootstrap_tokens t ON t.hash = c.bootstrap_hash
		WHERE c.name = ? AND c.bootstrap_hash = ? AND c.registration_key_hash = ? AND c.revoked = 0 AND c.last_heartbeat = 0
		AND c.registered_at >= ? AND t.revoked = 0`), cluster, hash, keyHash, ms(since)).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("checking for a registration of %s to complete again: %w", cluster, err)
	}
	return n > 0, nil
}

// RegistrationRetryable implements store.Store.
func (s *Store) RegistrationRetryable(ctx context.Context, cluster, hash, keyHash string, since time.Time) (bool, error) {
	return s.retryable(ctx, s.db, cluster, hash, keyHash, since)
}

// assignBundles (re)selects every live bundle for a cluster with these labels, replacing its
// desired revisions. Per bundle the candidate revisions are, in order: the target of an
// active rollout that has already moved the cluster; with keepHeld, the revision the cluster
// holds; the bundle's stable revision. The first candidate whose selector matches wins, and
// a cluster matching none of them loses the bundle. (A moved cluster that no longer matches
// the target loses the bundle too: that is what moving it would have done.)
func (s *Store) assignBundles(ctx context.Context, tx *sql.Tx, cluster string, labels map[string]string, now int64, match store.Matcher, keepHeld bool) error {
	type candidate struct {
		rev      int64
		selector string
	}
	stable := map[string]candidate{}
	var names []string
	rows, err := tx.QueryContext(ctx, `SELECT b.name, b.stable_revision, COALESCE(r.selector, '') FROM bundles b
		LEFT JOIN bundle_revisions r ON r.bundle = b.name AND r.revision = b.stable_revision
		WHERE b.deleted = 0 ORDER BY b.name`)
	if err != nil {
		return fmt.Errorf("listing bundles: %w", err)
	}
	for rows.Next() {
		var (
			name string
			c    candidate
		)
		if err := rows.Scan(&name, &c.rev, &c.selector); err != nil {
			rows.Close()
			return fmt.Errorf("reading bundle: %w", err)
		}
		names = append(names, name)
		stable[name] = c
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("listing bundles: %w", err)
	}
	readCandidates := func(query string) (map[string]candidate, error) {
		out := map[string]candidate{}
		rows, err := tx.QueryContext(ctx, s.q(query), cluster)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				name string
				c    candidate
			)
			if err := rows.Scan(&name, &c.rev, &c.selector); err != nil {
				return nil, err
			}
			out[name] = c
		}
		return out, rows.Err()
	}
	moved, err := readCandidates(`SELECT r.bundle, r.to_revision, br.selector FROM rollouts r
		JOIN rollout_clusters rc ON rc.rollout_id = r.id
		JOIN bundle_revisions br ON br.bundle = r.bundle AND br.revision = r.to_revision
		WHERE r.active = 1 AND rc.cluster = ? AND rc.moved_at > 0`)
	if err != nil {
		return fmt.Errorf("reading rollouts of %s: %w", cluster, err)
	}
	held := map[string]candidate{}
	if keepHeld {
		if held, err = readCandidates(`SELECT cb.bundle, cb.desired_revision, br.selector FROM cluster_bundles cb
			JOIN bundle_revisions br ON br.bundle = cb.bundle AND br.revision = cb.desired_revision
			WHERE cb.cluster = ?`); err != nil {
			return fmt.Errorf("reading desired bundles of %s: %w", cluster, err)
		}
	}
	if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM cluster_bundles WHERE cluster = ?`), cluster); err != nil {
		return fmt.Errorf("clearing desired bundles of %s: %w", cluster, err)
	}
	for _, name := range names {
		var cands []candidate
		if c, ok := moved[name]; ok {
			cands = append(cands, c)
		} else {
			if c, ok := held[name]; ok {
				cands = append(cands, c)
			}
			if c := stable[name]; c.rev > 0 {
				cands = append(cands, c)
			}
		}
		for _, c := range cands {
			ok, err := match(c.selector, labels)
			if err != nil {
				return fmt.Errorf("bundle %s selector: %w", name, err)
			}
			if !ok {
				continue
			}
			if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO cluster_bundles (cluster, bundle, desired_revision, updated_at)
				VALUES (?, ?, ?, ?)`), cluster, name, c.rev, now); err != nil {
				return fmt.Errorf("assigning bundle %s to %s: %w", name, cluster, err)
			}
			break
		}
	}
	return s.uncheckApplied(ctx, tx, []string{cluster})
}

// ClusterByCredential implements store.Store.
func (s *Store) ClusterByCredential(ctx context.Context, hash string) (store.Cluster, error) {
	c, err := scanCluster(s.stmt(qClusterByCredential).QueryRowContext(ctx, hash))
	if errors.Is(err, sql.ErrNoRows) && hash != "" {
		c, err = scanCluster(s.stmt(qClusterByPrevious).QueryRowContext(ctx, hash))
	}
	if err != nil {
		return c, notFound(err, "looking up agent credential")
	}
	return c, nil
}

// ClusterCredentials implements store.Store.
func (s *Store) ClusterCredentials(ctx context.Context) ([]store.Cluster, error) {
	return queryAll(ctx, s.db, "cluster credentials", func(sc scanner) (store.Cluster, error) {
		var (
			c                 store.Cluster
			rev, exp, prevExp int64
		)
		err := sc.Scan(&c.Name, &rev, &c.CredentialHash, &exp, &c.PreviousCredentialHash, &prevExp)
		c.Revoked, c.CredentialExpiresAt, c.PreviousExpiresAt = rev != 0, fromMS(exp), fromMS(prevExp)
		return c, err
	}, `SELECT name, revoked, credential_hash, credential_expires_at, previous_credential_hash, previous_expires_at
		FROM clusters`)
}

// RotateCredential implements store.Store.
func (s *Store) RotateCredential(ctx context.Context, r store.Rotation) (store.Cluster, error) {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := s.bumpClusterEpoch(ctx, tx); err != nil {
			return err
		}
		// Each statement compares the presented credential with the stored one, so two
		// rotations at once cannot both win with the same credential.
		res, err := tx.ExecContext(ctx, s.q(`UPDATE clusters SET previous_credential_hash = credential_hash,
			previous_expires_at = ?, credential_hash = ?, credential_expires_at = ?, credential_used = 0
			WHERE name = ? AND credential_hash = ? AND revoked = 0`),
			ms(r.PreviousUntil), r.NewHash, ms(r.NewExpiresAt), r.Cluster, r.PresentedHash)
		if err != nil {
			return fmt.Errorf("rotating the credential of %s: %w", r.Cluster, err)
		}
		if n, _ := res.RowsAffected(); n > 0 {
			return nil
		}
		// The previous credential rotates again only while the current one was never used:
		// its agent could not store it. Once a heartbeat presented the current credential,
		// whoever still holds the previous one is not that agent.
		res, err = tx.ExecContext(ctx, s.q(`UPDATE clusters SET credential_hash = ?, credential_expires_at = ?
			WHERE name = ? AND previous_credential_hash = ? AND credential_used = 0 AND revoked = 0`),
			r.NewHash, ms(r.NewExpiresAt), r.Cluster, r.PresentedHash)
		if err != nil {
			return fmt.Errorf("rotating the credential of %s: %w", r.Cluster, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("rotating the credential of %s: %w", r.Cluster, store.ErrNotFound)
		}
		return nil
	})
	if err != nil {
		return store.Cluster{}, err
	}
	return s.GetCluster(ctx, r.Cluster)
}

// GetCluster implements store.Store.
func (s *Store) GetCluster(ctx context.Context, name string) (store.Cluster, error) {
	c, err := scanCluster(s.db.QueryRowContext(ctx, s.q(`SELECT `+clusterCols+` FROM clusters WHERE name = ?`), name))
	if err != nil {
		return c, notFound(err, "cluster "+name)
	}
	return c, nil
}

// ListClusters implements store.Store.
func (s *Store) ListClusters(ctx context.Context) ([]store.Cluster, error) {
	return queryAll(ctx, s.db, "clusters", scanCluster, `SELECT `+clusterCols+` FROM clusters ORDER BY name`)
}

// LiveClusters implements store.Store.
func (s *Store) LiveClusters(ctx context.Context) ([]string, error) {
	return queryAll(ctx, s.db, "live clusters", scanString,
		`SELECT name FROM clusters WHERE revoked = 0 AND approval = 'approved' ORDER BY name`)
}

// RevokeCluster implements store.Store.
func (s *Store) RevokeCluster(ctx context.Context, name string) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		return s.revokeCluster(ctx, tx, name)
	})
}

// revokeCluster revokes a cluster in tx: RevokeCluster, and RejectCluster's revocation.
func (s *Store) revokeCluster(ctx context.Context, tx *sql.Tx, name string) error {
	if err := s.bumpClusterEpoch(ctx, tx); err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, s.q(`UPDATE clusters SET revoked = 1, released = 0 WHERE name = ?`), name)
	if err != nil {
		return fmt.Errorf("revoking cluster %s: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("revoking cluster %s: %w", name, store.ErrNotFound)
	}
	return nil
}

// ReleaseCluster implements store.Store.
func (s *Store) ReleaseCluster(ctx context.Context, name string) error {
	var released int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := s.bumpClusterEpoch(ctx, tx); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, s.q(`UPDATE clusters SET released = 1 WHERE name = ? AND revoked = 1`), name)
		if err != nil {
			return fmt.Errorf("releasing cluster %s: %w", name, err)
		}
		released, _ = res.RowsAffected()
		return nil
	})
	if err != nil || released > 0 {
		return err
	}
	if _, err := s.GetCluster(ctx, name); err != nil {
		return fmt.Errorf("releasing: %w", err)
	}
	return fmt.Errorf("releasing cluster %s: it is not revoked: %w", name, store.ErrConflict)
}

// SetClusterLabels implements store.Store.
func (s *Store) SetClusterLabels(ctx context.Context, name string, labels map[string]string, match store.Matcher) error {
	raw, err := json.Marshal(labels)
	if err != nil {
		return fmt.Errorf("encoding labels: %w", err)
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if err := s.bumpEpoch(ctx, tx); err != nil {
			return err
		}
		if err := s.bumpClusterEpoch(ctx, tx); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, s.q(`UPDATE clusters SET labels = ? WHERE name = ?`), string(raw), name)
		if err != nil {
			return fmt.Errorf("setting labels of %s: %w", name, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("setting labels of %s: %w", name, store.ErrNotFound)
		}
		return s.assignBundles(ctx, tx, name, labels, ms(nowUTC()), match, true)
	})
}

// DeleteCluster implements store.Store.
func (s *Store) DeleteCluster(ctx context.Context, name string) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if err := s.bumpEpoch(ctx, tx); err != nil {
			return err
		}
		if err := s.bumpClusterEpoch(ctx, tx); err != nil {
			return err
		}
		// Explicitly, not by cascade: SQLite enforces foreign keys only when told to.
		if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM cluster_bundles WHERE cluster = ?`), name); err != nil {
			return fmt.Errorf("deleting desired bundles of %s: %w", name, err)
		}
		if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM cluster_heartbeats WHERE cluster = ?`), name); err != nil {
			return fmt.Errorf("deleting heartbeat history of %s: %w", name, err)
		}
		res, err := tx.ExecContext(ctx, s.q(`DELETE FROM clusters WHERE name = ?`), name)
		if err != nil {
			return fmt.Errorf("deleting cluster %s: %w", name, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("deleting cluster %s: %w", name, store.ErrNotFound)
		}
		return nil
	})
}
