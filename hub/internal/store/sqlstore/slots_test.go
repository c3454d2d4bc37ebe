package sqlstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"kollect.dev/hub/internal/store"
	"kollect.dev/hub/internal/store/sqlstore"
)

// TestHeartbeatsLeaveConnectionsFree: on PostgreSQL, heartbeats hold at most some of the pool's
// connections. With every heartbeat slot taken, as in a burst of thousands, a heartbeat waits
// for a slot (its deadline passes before it reaches the database: no ErrNotFound for the
// unknown cluster), while other queries still get a connection at once.
func TestHeartbeatsLeaveConnectionsFree(t *testing.T) {
	ctx := context.Background()
	url, err := pg.CreateDatabase(ctx, "hubstore_slots")
	if err != nil {
		t.Fatal(err)
	}
	s, err := sqlstore.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	slots := s.HeartbeatSlots()
	if slots == nil {
		t.Fatal("a PostgreSQL store does not bound its heartbeats' connections")
	}
	if pool := s.DB().Stats().MaxOpenConnections; cap(slots) >= pool {
		t.Fatalf("heartbeats may hold %d of the pool's %d connections: none is left for the rest", cap(slots), pool)
	}
	for range cap(slots) {
		slots <- struct{}{}
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = s.RecordHeartbeat(short, store.Heartbeat{Cluster: "nobody", At: time.Now()})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a heartbeat with every slot taken returned %v, want it to wait for a slot until its deadline", err)
	}
	// What a heartbeat burst must not starve: as many queries at once as the rest of the pool.
	errs := make(chan error, s.DB().Stats().MaxOpenConnections-cap(slots))
	for range cap(errs) {
		go func() {
			c, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, err := s.ConfigEpoch(c)
			errs <- err
		}()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Fatalf("a query while heartbeats hold their slots: %v", err)
		}
	}
	for range cap(slots) {
		<-slots
	}
	if err := s.RecordHeartbeat(ctx, store.Heartbeat{Cluster: "nobody", At: time.Now()}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a heartbeat of an unknown cluster with slots free returned %v, want ErrNotFound", err)
	}
}
