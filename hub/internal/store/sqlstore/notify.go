package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// configChannel is the PostgreSQL notification channel bumpEpoch notifies on.
const configChannel = "kollect_config_epoch"

// WatchConfig implements store.ConfigWatcher: on PostgreSQL it listens for the notification
// every transaction that moves the config epoch sends, and calls changed for each, so that a
// replica sends another replica's change to its agents at once instead of at its next poll.
// It holds one connection of its own (LISTEN needs a session) and, when that connection
// drops, reconnects with backoff and calls changed once more, since notifications sent
// meanwhile are lost. On SQLite (one process) it returns at once. It returns when ctx ends.
func (s *Store) WatchConfig(ctx context.Context, changed func(), onError func(error)) {
	if s.dsn == "" {
		return
	}
	delay := 100 * time.Millisecond
	for first := true; ctx.Err() == nil; first = false {
		err := s.listen(ctx, changed, !first)
		if ctx.Err() != nil {
			return
		}
		onError(err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, 10*time.Second)
	}
}

// listen holds one LISTEN session until it fails or ctx ends; catchUp calls changed once
// the session listens, for what a previous session may have missed.
func (s *Store) listen(ctx context.Context, changed func(), catchUp bool) error {
	conn, err := pgx.Connect(ctx, s.dsn)
	if err != nil {
		return fmt.Errorf("connecting to listen for configuration changes: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+configChannel); err != nil {
		return fmt.Errorf("listening for configuration changes: %w", err)
	}
	if catchUp {
		changed()
	}
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return fmt.Errorf("waiting for configuration changes: %w", err)
		}
		changed()
	}
}
