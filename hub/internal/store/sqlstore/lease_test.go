package sqlstore_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"kollect.dev/hub/internal/store/sqlstore"
)

// lessee holds the rollout lease through one store, as one hub replica does.
type lessee struct {
	held   atomic.Bool
	taken  chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

func holdLease(t *testing.T, dsn string) *lessee {
	t.Helper()
	s, err := sqlstore.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	l := &lessee{taken: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		s.HoldLease(ctx, "rollouts", func(h bool) {
			l.held.Store(h)
			if h {
				l.taken <- struct{}{}
			}
		}, func(err error) { t.Logf("lease: %v", err) })
	}()
	t.Cleanup(func() { cancel(); <-l.done })
	return l
}

// TestLeaseOneHolder: of two stores on one PostgreSQL database exactly one holds the lease
// (PostgreSQL's pg_locks, read with psql, shows one granted advisory lock); when the holder's
// session ends the other takes it at once, and the first, back, waits its turn. On SQLite the
// lease is held at once.
func TestLeaseOneHolder(t *testing.T) {
	ctx := context.Background()
	dsn, err := pg.CreateDatabase(ctx, "hubstore_lease")
	if err != nil {
		t.Fatal(err)
	}
	a := holdLease(t, dsn)
	select {
	case <-a.taken:
	case <-time.After(30 * time.Second):
		t.Fatal("the only store never took the lease")
	}
	b := holdLease(t, dsn)
	granted := func() string {
		out, err := exec.Command("psql", dsn, "-tAc",
			`SELECT granted FROM pg_locks WHERE locktype = 'advisory' ORDER BY granted DESC`).CombinedOutput()
		if err != nil {
			t.Fatalf("psql: %v: %s", err, out)
		}
		return strings.Join(strings.Fields(string(out)), ",")
	}
	deadline := time.Now().Add(30 * time.Second)
	for granted() != "t,f" { // a holds it, b waits for it
		if time.Now().After(deadline) {
			t.Fatalf("advisory locks %q, want one granted and one waiting", granted())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !a.held.Load() || b.held.Load() {
		t.Fatalf("held: a %v, b %v", a.held.Load(), b.held.Load())
	}
	a.cancel() // a's session ends, as a killed replica's does
	<-a.done
	if a.held.Load() {
		t.Error("a still thinks it holds the lease")
	}
	select {
	case <-b.taken:
	case <-time.After(30 * time.Second):
		t.Fatal("b did not take the lease after a let go")
	}

	c := holdLease(t, filepath.Join(t.TempDir(), "hub.db"))
	select {
	case <-c.taken:
	case <-time.After(10 * time.Second):
		t.Fatal("an SQLite store does not hold the lease")
	}
}
