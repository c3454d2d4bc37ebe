package server_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"

	"kollect.dev/hub/internal/server"
)

// TestBadTokenRegistrationsTakeNoLock: registrations with unknown, expired or used-up tokens
// are refused by a read before any transaction takes the store's write lock. The evidence is
// PostgreSQL's own count of rolled-back transactions (pg_stat_database.xact_rollback) over the
// 50 refusals: a registering transaction refused for its token rolls back, a read does not.
func TestBadTokenRegistrationsTakeNoLock(t *testing.T) {
	ctx := context.Background()
	dsn, err := pg.CreateDatabase(ctx, "hub_bad_tokens")
	if err != nil {
		t.Fatal(err)
	}
	h := startHub(t, "", func(c *server.Config) { c.StoreDSN = dsn })
	used := h.bootstrapToken(t, time.Hour, 1, false).GetSecret()
	h.register(t, used, "first", nil)
	expired := h.bootstrapToken(t, time.Minute, 0, false).GetSecret()
	h.clock.Advance(2 * time.Minute)

	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rollbacks := func() int64 {
		t.Helper()
		// The statistics collector reports with a delay; a snapshot cleared first is current.
		if _, err := conn.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
			t.Fatal(err)
		}
		var n int64
		if err := conn.QueryRow(ctx, "SELECT xact_rollback FROM pg_stat_database WHERE datname = current_database()").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := rollbacks()
	for i := range 50 {
		tok := []string{"kbt_unknown", used, expired}[i%3]
		if _, _, err := h.tryRegister(tok, "flood", nil); connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Fatalf("registration %d with a bad token: %v, want Unauthenticated", i, err)
		}
	}
	// A registration refused for its name (after the token check passed) does roll back: it
	// shows that the count sees the hub's transactions.
	if _, _, err := h.tryRegister(h.bootstrapToken(t, time.Hour, 1, false).GetSecret(), "first", nil); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Fatalf("duplicate name: %v, want AlreadyExists", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	var after int64
	for {
		after = rollbacks()
		if after > before || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond) // the backends report their counters every second
	}
	if after-before != 1 {
		t.Fatalf("xact_rollback moved by %d over 50 bad-token registrations and one duplicate name, want 1 (the duplicate): "+
			"bad tokens opened write transactions", after-before)
	}
}
