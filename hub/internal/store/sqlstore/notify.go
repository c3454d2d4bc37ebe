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
	s.listenLoop(ctx, configChannel, changed, func(string) { changed() }, onError)
}

// listenLoop listens on channel until ctx ends, calling notified with each notification's
// payload, and reconnects with backoff when the session fails; catchUp is called once each
// session listens, the first too: what was committed before it listened (since the replica
// started, or while it reconnected) sent notifications no session heard.
func (s *Store) listenLoop(ctx context.Context, channel string, catchUp func(), notified func(payload string), onError func(error)) {
	delay := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := s.listen(ctx, channel, catchUp, notified)
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

// listen holds one LISTEN session until it fails or ctx ends; catchUp is called once the
// session listens.
func (s *Store) listen(ctx context.Context, channel string, catchUp func(), notified func(string)) error {
	conn, err := pgx.Connect(ctx, s.dsn)
	if err != nil {
		return fmt.Errorf("connecting to listen on %s: %w", channel, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+channel); err != nil {
		return fmt.Errorf("listening on %s: %w", channel, err)
	}
	catchUp()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("waiting for notifications on %s: %w", channel, err)
		}
		notified(n.Payload)
	}
}
