package sqlstore

import (
	"context"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/jackc/pgx/v5"
)

// leaseCheck is how often the holder of a lease checks that its session still holds it. A
// holder whose database connection broke stops acting within about this long, and the
// database ends a vanished holder's session within leaseKeepalive's bound.
const leaseCheck = time.Second

// leaseKeepalive makes PostgreSQL probe the lease session's client: a holder whose node
// vanished without closing its connection loses the lease after about 5 + 2×3 = 11 s, not
// after the system's two hours. A holder that dies with its connection (a process killed,
// its TCP connection reset or closed by the kernel) loses it at once.
const leaseKeepalive = `SET tcp_keepalives_idle = 5; SET tcp_keepalives_interval = 2; SET tcp_keepalives_count = 3`

// HoldLease implements store.Leaser with a PostgreSQL session-level advisory lock taken on a
// connection of its own: pg_advisory_lock waits until no other session holds it, so a
// standby takes over the moment the holder's session ends. held(true) is called when this
// store takes the lease, held(false) when it loses it (its session failed: it can no longer
// know that it holds it). On SQLite (one process) the lease is held at once and for good.
func (s *Store) HoldLease(ctx context.Context, name string, held func(bool), onError func(error)) {
	if s.dsn == "" {
		held(true)
		return
	}
	delay := 100 * time.Millisecond
	for ctx.Err() == nil {
		took, err := s.holdLease(ctx, leaseKey(name), held)
		if ctx.Err() != nil {
			return
		}
		onError(err)
		if took {
			delay = 100 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// holdLease takes the lease on a new session and holds it until the session fails or ctx
// ends; took says whether it was taken.
func (s *Store) holdLease(ctx context.Context, key int64, held func(bool)) (took bool, err error) {
	conn, err := pgx.Connect(ctx, s.dsn)
	if err != nil {
		return false, fmt.Errorf("connecting for the lease: %w", err)
	}
	// Closing the connection ends the session, which releases the lock.
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, leaseKeepalive); err != nil {
		return false, fmt.Errorf("configuring the lease session: %w", err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, key); err != nil {
		return false, fmt.Errorf("waiting for the lease: %w", err)
	}
	held(true)
	defer held(false)
	t := time.NewTicker(leaseCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return true, nil
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, leaseCheck)
		err := conn.Ping(pctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			return true, fmt.Errorf("lease session lost: %w", err)
		}
	}
}

// leaseKey is the advisory lock key of a lease name, apart from the migration lock's.
func leaseKey(name string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte("kollect-hub lease " + name))
	return int64(h.Sum64() >> 1)
}
