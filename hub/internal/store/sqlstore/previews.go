package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"kollect.dev/hub/internal/store"
)

// previewChannel is the PostgreSQL notification channel of previews; the payload is the
// event's letter (c: created, a: answered) and the preview's ID.
const previewChannel = "kollect_previews"

const (
	previewCreatedTag  = "c"
	previewAnsweredTag = "a"
)

// notifyPreview tells the other replicas (and this one) of a preview event when tx commits.
func (s *Store) notifyPreview(ctx context.Context, tx querier, tag, id string) error {
	if s.d.name != postgresDialect.name {
		return nil
	}
	if _, err := tx.ExecContext(ctx, `SELECT pg_notify('`+previewChannel+`', $1)`, tag+id); err != nil {
		return fmt.Errorf("notifying the other replicas of preview %s: %w", id, err)
	}
	return nil
}

// CreatePreview implements store.PreviewStore.
func (s *Store) CreatePreview(ctx context.Context, p store.Preview) error {
	clusters, err := json.Marshal(nonNil(p.Clusters))
	if err != nil {
		return fmt.Errorf("encoding preview clusters: %w", err)
	}
	notConnected, err := json.Marshal(nonNil(p.NotConnected))
	if err != nil {
		return fmt.Errorf("encoding preview clusters: %w", err)
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, s.q(`INSERT INTO previews (id, bundle, requested_by, manifests, max_samples, clusters,
			not_connected, created_at, deadline, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
			p.ID, p.Bundle, p.RequestedBy, p.Manifests, int64(p.MaxSamples), string(clusters), string(notConnected),
			ms(p.CreatedAt), ms(p.Deadline), ms(p.ExpiresAt))
		if isUniqueViolation(err) {
			return fmt.Errorf("preview %s: %w", p.ID, store.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("creating preview %s: %w", p.ID, err)
		}
		return s.notifyPreview(ctx, tx, previewCreatedTag, p.ID)
	})
}

func nonNil(names []string) []string {
	if names == nil {
		return []string{}
	}
	return names
}

// GetPreview implements store.PreviewStore.
func (s *Store) GetPreview(ctx context.Context, id string) (store.Preview, error) {
	return s.getPreview(ctx, s.db, id)
}

func (s *Store) getPreview(ctx context.Context, q querier, id string) (store.Preview, error) {
	var (
		p                              store.Preview
		maxSamples                     int64
		clusters, notConnected         string
		createdAt, deadline, expiresAt int64
	)
	err := q.QueryRowContext(ctx, s.q(`SELECT id, bundle, requested_by, manifests, max_samples, clusters, not_connected,
		created_at, deadline, expires_at FROM previews WHERE id = ?`), id).Scan(&p.ID, &p.Bundle, &p.RequestedBy,
		&p.Manifests, &maxSamples, &clusters, &notConnected, &createdAt, &deadline, &expiresAt)
	if err != nil {
		return store.Preview{}, notFound(err, "preview "+id)
	}
	if err := json.Unmarshal([]byte(clusters), &p.Clusters); err != nil {
		return store.Preview{}, fmt.Errorf("decoding clusters of preview %s: %w", id, err)
	}
	if err := json.Unmarshal([]byte(notConnected), &p.NotConnected); err != nil {
		return store.Preview{}, fmt.Errorf("decoding clusters of preview %s: %w", id, err)
	}
	p.MaxSamples = int32(maxSamples)
	p.CreatedAt, p.Deadline, p.ExpiresAt = fromMS(createdAt), fromMS(deadline), fromMS(expiresAt)
	return p, nil
}

// RecordPreviewAnswer implements store.PreviewStore.
func (s *Store) RecordPreviewAnswer(ctx context.Context, a store.PreviewAnswer) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		p, err := s.getPreview(ctx, tx, a.PreviewID)
		if err != nil {
			return err
		}
		if !a.ReceivedAt.Before(p.ExpiresAt) {
			return fmt.Errorf("preview %s expired at %s: %w", a.PreviewID, p.ExpiresAt.Format(time.RFC3339), store.ErrNotFound)
		}
		if !slices.Contains(p.Clusters, a.Cluster) {
			return fmt.Errorf("answer of cluster %s to preview %s: %w", a.Cluster, a.PreviewID, store.ErrNotAsked)
		}
		_, err = tx.ExecContext(ctx, s.q(`INSERT INTO preview_results (preview_id, cluster, result, received_at)
			VALUES (?, ?, ?, ?) ON CONFLICT (preview_id, cluster) DO UPDATE SET result = excluded.result,
			received_at = excluded.received_at`), a.PreviewID, a.Cluster, a.Result, ms(a.ReceivedAt))
		if err != nil {
			return fmt.Errorf("recording the answer of cluster %s to preview %s: %w", a.Cluster, a.PreviewID, err)
		}
		return s.notifyPreview(ctx, tx, previewAnsweredTag, a.PreviewID)
	})
}

// PreviewAnswers implements store.PreviewStore.
func (s *Store) PreviewAnswers(ctx context.Context, id string) ([]store.PreviewAnswer, error) {
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT preview_id, cluster, result, received_at FROM preview_results
		WHERE preview_id = ? ORDER BY cluster`), id)
	if err != nil {
		return nil, fmt.Errorf("listing answers to preview %s: %w", id, err)
	}
	defer rows.Close()
	var out []store.PreviewAnswer
	for rows.Next() {
		var (
			a  store.PreviewAnswer
			at int64
		)
		if err := rows.Scan(&a.PreviewID, &a.Cluster, &a.Result, &at); err != nil {
			return nil, fmt.Errorf("reading an answer to preview %s: %w", id, err)
		}
		a.ReceivedAt = fromMS(at)
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing answers to preview %s: %w", id, err)
	}
	return out, nil
}

// DeleteExpiredPreviews implements store.PreviewStore. Answers go with their preview (ON
// DELETE CASCADE).
func (s *Store) DeleteExpiredPreviews(ctx context.Context, now time.Time) (int64, error) {
	res, err := s.db.ExecContext(ctx, s.q(`DELETE FROM previews WHERE expires_at <= ?`), ms(now))
	if err != nil {
		return 0, fmt.Errorf("deleting expired previews: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("deleting expired previews: %w", err)
	}
	return n, nil
}

// WatchPreviews implements store.PreviewWatcher: on PostgreSQL it listens on previewChannel
// with a connection of its own, reconnecting with backoff. Events sent meanwhile are lost: a
// requester's reads still find its answers (a PreviewAnswered with no ID follows each
// session's start), and a preview created then reaches only the streams of the replica that
// created it. On SQLite it returns at once.
func (s *Store) WatchPreviews(ctx context.Context, event func(store.PreviewEvent, string), onError func(error)) {
	if s.dsn == "" {
		return
	}
	// Once a session listens, waiting requesters read again at once for the answers missed.
	s.listenLoop(ctx, previewChannel, func() { event(store.PreviewAnswered, "") }, func(payload string) {
		if len(payload) < 2 {
			return
		}
		switch payload[:1] {
		case previewCreatedTag:
			event(store.PreviewCreated, payload[1:])
		case previewAnsweredTag:
			event(store.PreviewAnswered, payload[1:])
		}
	}, onError)
}

var _ store.PreviewWatcher = (*Store)(nil)
