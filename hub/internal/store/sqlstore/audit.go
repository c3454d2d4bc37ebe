package sqlstore

import (
	"context"
	"fmt"
	"time"

	"kollect.dev/hub/internal/store"
)

func nowUTC() time.Time { return time.Now().UTC() }

// AppendAudit implements store.Store.
func (s *Store) AppendAudit(ctx context.Context, e store.AuditEvent) error {
	return s.appendAudit(ctx, s.db, e)
}

func (s *Store) appendAudit(ctx context.Context, q querier, e store.AuditEvent) error {
	if e.Time.IsZero() {
		e.Time = nowUTC()
	}
	_, err := q.ExecContext(ctx, s.q(`INSERT INTO audit_log (at, actor, action, target, detail) VALUES (?, ?, ?, ?, ?)`),
		ms(e.Time), e.Actor, e.Action, e.Target, e.Detail)
	if err != nil {
		return fmt.Errorf("writing audit event %s by %s: %w", e.Action, e.Actor, err)
	}
	return nil
}

// ListAudit implements store.Store.
func (s *Store) ListAudit(ctx context.Context, beforeID int64, limit int) ([]store.AuditEvent, error) {
	query := `SELECT id, at, actor, action, target, detail FROM audit_log`
	var args []any
	if beforeID > 0 {
		query += ` WHERE id < ?`
		args = append(args, beforeID)
	}
	query += ` ORDER BY id DESC LIMIT ?`
	args = append(args, limit)
	rows, err := s.db.QueryContext(ctx, s.q(query), args...)
	if err != nil {
		return nil, fmt.Errorf("listing audit log: %w", err)
	}
	defer rows.Close()
	var out []store.AuditEvent
	for rows.Next() {
		var (
			e  store.AuditEvent
			at int64
		)
		if err := rows.Scan(&e.ID, &at, &e.Actor, &e.Action, &e.Target, &e.Detail); err != nil {
			return nil, fmt.Errorf("reading audit event: %w", err)
		}
		e.Time = fromMS(at)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing audit log: %w", err)
	}
	return out, nil
}
