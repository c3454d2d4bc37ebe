package testenv

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestPgBouncerQueuesClientsOnItsPool: the real PgBouncer, in either pool mode, accepts a role
// by its password (SCRAM) and refuses a wrong one, relays psql's statements to PostgreSQL
// (SHOW STATS counts them), and with a pool of one server connection makes three clients
// that want one at once queue for it: SHOW POOLS shows one server connection, one client
// linked to it and two waiting, until the lock the first waits for is released.
func TestPgBouncerQueuesClientsOnItsPool(t *testing.T) {
	pg, err := StartPostgres()
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Stop()
	ctx := context.Background()
	const role, password = "fleet", "s3cret pw"
	if err := pg.RequirePassword(ctx, role, password); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"transaction", "session"} {
		t.Run(mode, func(t *testing.T) {
			b, err := StartPgBouncer(pg, PgBouncerOptions{PoolMode: mode, PoolSize: 1, Users: map[string]string{role: password}})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Stop()
			psql := func(ctx context.Context, password, sql string) *exec.Cmd {
				cmd := exec.CommandContext(ctx, "psql", b.URL(role, "postgres"), "-X", "-qAtc", sql)
				cmd.Env = append(os.Environ(), "PGPASSWORD="+password)
				return cmd
			}
			if out, err := psql(ctx, password, "SELECT current_user").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != role {
				t.Fatalf("through PgBouncer with the password: %q %v", out, err)
			}
			if out, err := psql(ctx, "wrong", "SELECT 1").CombinedOutput(); err == nil || !strings.Contains(string(out), "SASL authentication failed") {
				t.Fatalf("through PgBouncer with a wrong password: %q %v", out, err)
			}
			// A session outside PgBouncer holds the lock every client then asks for.
			holder := exec.CommandContext(ctx, "psql", pg.URL, "-X", "-qAt", "-v", "ON_ERROR_STOP=1")
			stdin, err := holder.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			out := &lockedBuffer{}
			holder.Stdout, holder.Stderr = out, out
			if err := holder.Start(); err != nil {
				t.Fatal(err)
			}
			defer holder.Process.Kill()
			if _, err := io.WriteString(stdin, "BEGIN;\nSELECT pg_advisory_xact_lock(42);\nSELECT 'locked';\n"); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the holder to take the lock", func() bool { return strings.Contains(out.String(), "locked") })

			const clients = 3
			done := make(chan error, clients)
			for range clients {
				go func() { done <- psql(ctx, password, "SELECT pg_advisory_xact_lock(42)").Run() }()
			}
			var pool PgBouncerPool
			waitFor(t, fmt.Sprintf("%d clients in PgBouncer's pool", clients), func() bool {
				if pool, err = b.Pool(ctx, "postgres", role); err != nil {
					t.Fatal(err)
				}
				return pool.ClActive+pool.ClWaiting == clients && pool.ClWaiting == clients-1
			})
			if pool.Servers() != 1 || pool.SvActive != 1 || pool.PoolMode != mode {
				t.Fatalf("with %d clients wanting a server connection at once, SHOW POOLS says %+v, want one server connection", clients, pool)
			}
			if _, err := io.WriteString(stdin, "COMMIT;\n"); err != nil {
				t.Fatal(err)
			}
			stdin.Close()
			for range clients {
				if err := <-done; err != nil {
					t.Fatalf("a queued client: %v", err)
				}
			}
			if err := holder.Wait(); err != nil {
				t.Fatalf("the lock holder: %v: %s", err, out)
			}
			// Two SELECTs that ran, and three that waited, went through PgBouncer.
			stats, err := b.Stats(ctx, "postgres")
			if err != nil {
				t.Fatal(err)
			}
			if stats.XactCount < 1+clients || stats.QueryCount < 1+clients {
				t.Fatalf("SHOW STATS: %+v, want at least %d transactions and statements", stats, 1+clients)
			}
			if pool, err = b.Pool(ctx, "postgres", role); err != nil || pool.Servers() != 1 {
				t.Fatalf("after the clients left, SHOW POOLS says %+v (%v), want the one server connection kept", pool, err)
			}
			t.Logf("%s pooling: %+v, %+v", mode, pool, stats)
		})
	}
}

// TestPgBouncerTakesAConfigFragment: a fragment with its own [pgbouncer] line and comments
// (as the docs show one) is merged into the one section, overrides PoolMode and leaves the
// harness's port; a fragment with another section is refused.
func TestPgBouncerTakesAConfigFragment(t *testing.T) {
	pg, err := StartPostgres()
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Stop()
	ctx := context.Background()
	b, err := StartPgBouncer(pg, PgBouncerOptions{PoolMode: "transaction",
		Config: "[pgbouncer]\n; a comment\npool_mode = session\nmax_client_conn = 50\n"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	if got, err := b.Setting(ctx, "max_client_conn"); err != nil || got != "50" || b.PoolMode != "session" {
		t.Fatalf("max_client_conn %q (%v), pool mode %q: the fragment was not applied", got, err, b.PoolMode)
	}
	if got, err := b.Setting(ctx, "listen_port"); err != nil || got != fmt.Sprint(b.Port) {
		t.Fatalf("listen_port %q (%v), want the harness's %d", got, err, b.Port)
	}
	if _, err := StartPgBouncer(pg, PgBouncerOptions{Config: "[databases]\nx = host=example.com"}); err == nil || !strings.Contains(err.Error(), "[databases]") {
		t.Fatalf("a fragment with a [databases] section: %v", err)
	}
}

// lockedBuffer is an output buffer exec's copying goroutine writes while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor polls cond until it holds, failing the test after 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30 s for %s", what)
		}
	}
}
