package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"kollect.dev/hub/internal/store"
)

// CreateBootstrapToken implements store.Store.
func (s *Store) CreateBootstrapToken(ctx context.Context, t store.BootstrapToken) error {
	labels, err := encodeBinding(t.Labels)
	if err != nil {
		return fmt.Errorf("creating bootstrap token %s: %w", t.ID, err)
	}
	_, err = s.db.ExecContext(ctx, s.q(`INSERT INTO bootstrap_tokens
		(id, hash, description, expires_at, max_uses, uses, revoked, allow_replace, created_by, created_at, cluster_name, labels,
		require_approval)
		VALUES (?, ?, ?, ?, ?, 0, 0, ?, ?, ?, ?, ?, ?)`),
		t.ID, t.Hash, t.Description, ms(t.ExpiresAt), t.MaxUses, b2i(t.AllowReplace), t.CreatedBy, ms(t.CreatedAt),
		t.ClusterName, labels, b2i(t.RequireApproval))
	if isUniqueViolation(err) {
		return fmt.Errorf("creating bootstrap token %s: %w", t.ID, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("creating bootstrap token %s: %w", t.ID, err)
	}
	return nil
}

// ListBootstrapTokens implements store.Store.
func (s *Store) ListBootstrapTokens(ctx context.Context) ([]store.BootstrapToken, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, hash, description, expires_at, max_uses, uses, revoked,
		allow_replace, created_by, created_at, cluster_name, labels, require_approval FROM bootstrap_tokens
		ORDER BY created_at DESC, id`)
	if err != nil {
		return nil, fmt.Errorf("listing bootstrap tokens: %w", err)
	}
	defer rows.Close()
	var out []store.BootstrapToken
	for rows.Next() {
		var (
			t                          store.BootstrapToken
			exp, created, rev, replace int64
			approval                   int64
			labels                     string
		)
		if err := rows.Scan(&t.ID, &t.Hash, &t.Description, &exp, &t.MaxUses, &t.Uses, &rev, &replace,
			&t.CreatedBy, &created, &t.ClusterName, &labels, &approval); err != nil {
			return nil, fmt.Errorf("reading bootstrap token: %w", err)
		}
		if t.Labels, err = decodeBinding(labels); err != nil {
			return nil, fmt.Errorf("reading bootstrap token %s: %w", t.ID, err)
		}
		t.ExpiresAt, t.CreatedAt, t.Revoked, t.AllowReplace = fromMS(exp), fromMS(created), rev != 0, replace != 0
		t.RequireApproval = approval != 0
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing bootstrap tokens: %w", err)
	}
	return out, nil
}

// RevokeBootstrapToken implements store.Store.
func (s *Store) RevokeBootstrapToken(ctx context.Context, id string) error {
	return s.revoke(ctx, "bootstrap_tokens", id)
}

// revoke sets revoked on the row of table with this id.
func (s *Store) revoke(ctx context.Context, table, id string) error {
	res, err := s.db.ExecContext(ctx, s.q(`UPDATE `+table+` SET revoked = 1 WHERE id = ?`), id)
	if err != nil {
		return fmt.Errorf("revoking %s %s: %w", table, id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("revoking %s %s: %w", table, id, store.ErrNotFound)
	}
	return nil
}

// CreateAPIToken implements store.Store.
func (s *Store) CreateAPIToken(ctx context.Context, t store.APIToken) error {
	_, err := s.db.ExecContext(ctx, s.q(`INSERT INTO api_tokens (id, name, hash, role, revoked, created_by, created_at, expires_at)
		VALUES (?, ?, ?, ?, 0, ?, ?, ?)`), t.ID, t.Name, t.Hash, int64(t.Role), t.CreatedBy, ms(t.CreatedAt), ms(t.ExpiresAt))
	if isUniqueViolation(err) {
		return fmt.Errorf("creating API token %q: name in use: %w", t.Name, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("creating API token %q: %w", t.Name, err)
	}
	return nil
}

const apiTokenCols = `id, name, hash, role, revoked, created_by, created_at, expires_at`

func scanAPIToken(sc scanner) (store.APIToken, error) {
	var (
		t                       store.APIToken
		role, rev, created, exp int64
	)
	if err := sc.Scan(&t.ID, &t.Name, &t.Hash, &role, &rev, &t.CreatedBy, &created, &exp); err != nil {
		return t, err
	}
	t.Role, t.Revoked, t.CreatedAt, t.ExpiresAt = store.Role(role), rev != 0, fromMS(created), fromMS(exp)
	return t, nil
}

// ListAPITokens implements store.Store.
func (s *Store) ListAPITokens(ctx context.Context) ([]store.APIToken, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+apiTokenCols+` FROM api_tokens ORDER BY created_at DESC, id`)
	if err != nil {
		return nil, fmt.Errorf("listing API tokens: %w", err)
	}
	defer rows.Close()
	var out []store.APIToken
	for rows.Next() {
		t, err := scanAPIToken(rows)
		if err != nil {
			return nil, fmt.Errorf("reading API token: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing API tokens: %w", err)
	}
	return out, nil
}

// RevokeAPIToken implements store.Store.
func (s *Store) RevokeAPIToken(ctx context.Context, id string) error {
	return s.revoke(ctx, "api_tokens", id)
}

// APITokenByHash implements store.Store.
func (s *Store) APITokenByHash(ctx context.Context, hash string) (store.APIToken, error) {
	t, err := scanAPIToken(s.db.QueryRowContext(ctx,
		s.q(`SELECT `+apiTokenCols+` FROM api_tokens WHERE hash = ? AND revoked = 0`), hash))
	if err != nil {
		return t, notFound(err, "looking up API token")
	}
	return t, nil
}

// BootstrapTokenUsable implements store.Store.
func (s *Store) BootstrapTokenUsable(ctx context.Context, hash string, now time.Time) error {
	var n int
	err := s.db.QueryRowContext(ctx, s.q(`SELECT count(*) FROM bootstrap_tokens
		WHERE hash = ? AND revoked = 0 AND expires_at > ? AND (max_uses = 0 OR uses < max_uses)`), hash, ms(now)).Scan(&n)
	if err != nil {
		return fmt.Errorf("checking bootstrap token: %w", err)
	}
	if n == 0 {
		return store.ErrTokenInvalid
	}
	return nil
}

// consumeBootstrapToken atomically takes one use of a live token and returns what a
// registration needs of it: its identity, and whether it allows replacing and requires approval.
func (s *Store) consumeBootstrapToken(ctx context.Context, tx *sql.Tx, hash string, nowMS int64) (store.BootstrapToken, error) {
	var t store.BootstrapToken
	res, err := tx.ExecContext(ctx, s.q(`UPDATE bootstrap_tokens SET uses = uses + 1
		WHERE hash = ? AND revoked = 0 AND expires_at > ? AND (max_uses = 0 OR uses < max_uses)`), hash, nowMS)
	if err != nil {
		return t, fmt.Errorf("consuming bootstrap token: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return t, store.ErrTokenInvalid
	}
	var replace, approval int64
	if err := tx.QueryRowContext(ctx, s.q(`SELECT id, description, created_by, allow_replace, require_approval
		FROM bootstrap_tokens WHERE hash = ?`), hash).Scan(&t.ID, &t.Description, &t.CreatedBy, &replace, &approval); err != nil {
		return t, fmt.Errorf("reading bootstrap token: %w", err)
	}
	t.AllowReplace, t.RequireApproval = replace != 0, approval != 0
	return t, nil
}

// encodeBinding stores a token's bound labels: empty for none, else a JSON object.
func encodeBinding(labels map[string]string) (string, error) {
	if len(labels) == 0 {
		return "", nil
	}
	b, err := json.Marshal(labels)
	if err != nil {
		return "", fmt.Errorf("encoding bound labels: %w", err)
	}
	return string(b), nil
}

func decodeBinding(raw string) (map[string]string, error) {
	if raw == "" {
		return nil, nil
	}
	var labels map[string]string
	if err := json.Unmarshal([]byte(raw), &labels); err != nil {
		return nil, fmt.Errorf("decoding bound labels: %w", err)
	}
	return labels, nil
}

// checkBinding refuses a registration of name with labels that the token of this hash is
// bound against (store.ErrTokenBinding, saying what the token allows); an unknown token
// passes, for the registration's own checks to refuse.
func (s *Store) checkBinding(ctx context.Context, q querier, hash, name string, labels map[string]string) error {
	var boundName, boundLabels string
	err := q.QueryRowContext(ctx, s.q(`SELECT cluster_name, labels FROM bootstrap_tokens WHERE hash = ?`), hash).Scan(&boundName, &boundLabels)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the bootstrap token's binding: %w", err)
	}
	if boundName != "" && boundName != name {
		return fmt.Errorf("this bootstrap token registers only cluster %s, not %s: %w", boundName, name, store.ErrTokenBinding)
	}
	want, err := decodeBinding(boundLabels)
	if err != nil {
		return err
	}
	if want != nil && !maps.Equal(want, labels) {
		return fmt.Errorf("this bootstrap token registers only a cluster labelled exactly %s, not %s: %w",
			labelString(want), labelString(labels), store.ErrTokenBinding)
	}
	return nil
}

// labelString writes labels as k=v,… sorted by key.
func labelString(labels map[string]string) string {
	if len(labels) == 0 {
		return "(no labels)"
	}
	keys := slices.Sorted(maps.Keys(labels))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + labels[k]
	}
	return strings.Join(parts, ",")
}
