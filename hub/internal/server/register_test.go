package server_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"

	"kollect.dev/hub/internal/server"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// TestBadTokenRegistrationsTakeNoLock: registrations with unknown, expired or used-up tokens
// are refused by a read before any transaction takes the store's write lock. The evidence is
// PostgreSQL's own count of rolled-back transactions (pg_stat_database.xact_rollback) over the
// 50 refusals: a registering transaction refused for its token rolls back, a read does not.
//
// A backend reports its counters late (up to PGSTAT_IDLE_INTERVAL, 10 s, after its last
// transaction), each on its own schedule, but always before it exits. So the window is a hub
// of its own on the store: it starts after the hub that prepared the tokens has stopped and
// every backend of the database but the test's has exited, and it closes when the window's
// hub has stopped and its backends have exited too. A registration refused for its name in
// the window is the positive control: it rolls back, and the count must show it.
func TestBadTokenRegistrationsTakeNoLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, err := pg.CreateDatabase(ctx, "hub_bad_tokens")
	if err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	withStore := func(c *server.Config) { c.StoreDSN = dsn }
	h := startHub(t, dataDir, withStore)
	used := h.bootstrapToken(t, time.Hour, 1, false).GetSecret()
	h.register(t, used, "first", nil)
	expired := h.bootstrapToken(t, time.Minute, 0, false).GetSecret()
	valid := h.bootstrapToken(t, time.Hour, 1, false).GetSecret()

	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// quiesced waits until no backend of the database but this connection's is left: every
	// other one has exited, and reported its counters as it did.
	quiesced := func(what string) {
		t.Helper()
		var others int
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&others); err != nil {
				t.Fatal(err)
			}
			if others == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d backends of the database still connected 60 s after %s stopped", others, what)
			}
		}
	}
	rollbacks := func() int64 {
		t.Helper()
		// A snapshot cleared first reads the shared counters as they are now.
		if _, err := conn.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
			t.Fatal(err)
		}
		var n int64
		if err := conn.QueryRow(ctx, "SELECT xact_rollback FROM pg_stat_database WHERE datname = current_database()").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	h.stop()
	quiesced("the preparing hub")
	before := rollbacks()

	h = startHub(t, dataDir, withStore)
	h.clock.Advance(2 * time.Minute)
	for i := range 50 {
		tok := []string{"kbt_unknown", used, expired}[i%3]
		if _, _, err := h.tryRegister(tok, "flood", nil); connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Fatalf("registration %d with a bad token: %v, want Unauthenticated", i, err)
		}
	}
	// A registration refused for its name (after the token check passed) does roll back: it
	// shows that the count sees the hub's transactions.
	if _, _, err := h.tryRegister(valid, "first", nil); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Fatalf("duplicate name: %v, want AlreadyExists", err)
	}
	h.stop()
	quiesced("the hub of the window")
	if after := rollbacks(); after-before != 1 {
		t.Fatalf("xact_rollback moved by %d over a hub's start, 50 bad-token registrations, one duplicate name and its stop, "+
			"want 1 (the duplicate): bad tokens opened write transactions", after-before)
	}
}

// syncBuffer is a bytes.Buffer safe for the hub's concurrent log writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestRefusedCallsAreLoggedWithoutTheirSecret: a bad API token, a viewer calling an admin
// procedure, a bad agent credential and a bad bootstrap token each leave a warning naming the
// procedure and the caller's address, and none of the presented secrets.
func TestRefusedCallsAreLoggedWithoutTheirSecret(t *testing.T) {
	t.Parallel()
	logs := &syncBuffer{}
	h := startHub(t, "", func(c *server.Config) { c.Log = slog.New(slog.NewTextHandler(logs, nil)) })
	ctx := context.Background()
	const badAPI, badAgent, badBootstrap = "kat_planted_api_secret", "kag_planted_agent_secret", "kbt_planted_bootstrap_secret"

	_, err := h.fleet(badAPI).ListClusters(ctx, connect.NewRequest(&fleetv1.ListClustersRequest{}))
	wantCode(t, err, connect.CodeUnauthenticated, "ListClusters with an unknown token")
	viewer := h.apiToken(t, "viewer", fleetv1.Role_ROLE_VIEWER)
	_, err = viewer.CreateBootstrapToken(ctx, connect.NewRequest(&fleetv1.CreateBootstrapTokenRequest{}))
	wantCode(t, err, connect.CodePermissionDenied, "a viewer creating a bootstrap token")
	_, err = h.agent(badAgent).ReportStatus(ctx, connect.NewRequest(&fleetv1.ReportStatusRequest{Status: &fleetv1.AgentStatus{}}))
	wantCode(t, err, connect.CodeUnauthenticated, "ReportStatus with an unknown credential")
	_, _, err = h.tryRegister(badBootstrap, "x", nil)
	wantCode(t, err, connect.CodeUnauthenticated, "Register with an unknown bootstrap token")

	out := logs.String()
	for _, want := range []string{"procedure=ListClusters", "procedure=CreateBootstrapToken", "procedure=ReportStatus",
		"procedure=Register", "peer=127.0.0.1:"} {
		if !strings.Contains(out, want) {
			t.Errorf("the hub's log lacks %q:\n%s", want, out)
		}
	}
	for _, secret := range []string{badAPI, badAgent, badBootstrap} {
		if strings.Contains(out, secret) {
			t.Errorf("the hub's log shows a presented secret %q", secret)
		}
	}
}
