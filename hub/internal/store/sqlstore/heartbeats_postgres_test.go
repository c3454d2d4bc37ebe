package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"kollect.dev/hub/internal/store"
	"kollect.dev/hub/internal/store/sqlstore"
)

// TestPostgresHeartbeatsThroughTwoReplicas: each replica writes a heartbeat as one statement
// from the marks it last wrote itself, so a cluster whose heartbeats alternate between two
// replicas finds its marks moved at every heartbeat. Every heartbeat must still land once,
// with the history as one replica alone would write it, pruned to its bound, and a revocation
// through one replica must refuse the other's next heartbeat although its marks are cached.
func TestPostgresHeartbeatsThroughTwoReplicas(t *testing.T) {
	ctx := context.Background()
	url, err := pg.CreateDatabase(ctx, "hubstore_heartbeat_replicas")
	if err != nil {
		t.Fatal(err)
	}
	open := func() *sqlstore.Store {
		s, err := sqlstore.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open(), open()
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	if err := a.CreateBootstrapToken(ctx, store.BootstrapToken{ID: "tok", Hash: "h-tok", ExpiresAt: t0.Add(time.Hour),
		CreatedBy: "token:admin", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"alpha", "beta"} {
		if _, err := a.RegisterCluster(ctx, store.RegisterParams{TokenHash: "h-tok", Name: name, CredentialHash: "cred-" + name,
			Now: t0}, func(string, map[string]string) (bool, error) { return true, nil }); err != nil {
			t.Fatal(err)
		}
	}

	beats := store.HistoryLimit + 3*16 + 5
	var last time.Time
	for i := range beats {
		s := a
		if i%3 == 2 { // two in a row on a, then one on b: both cached and moved marks
			s = b
		}
		last = t0.Add(time.Duration(i+1) * time.Second)
		rec := store.HeartbeatRecord{AgentVersion: "v1", SinkErrors: int64(i), State: "online"}
		if err := s.RecordHeartbeat(ctx, store.Heartbeat{Cluster: "alpha", At: last, AgentVersion: "v1", Status: "{}",
			Record: rec}); err != nil {
			t.Fatalf("heartbeat %d: %v", i, err)
		}
	}
	h, err := b.Heartbeats(ctx, "alpha", store.HistoryLimit)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != store.HistoryLimit {
		t.Fatalf("%d records, want %d", len(h), store.HistoryLimit)
	}
	for i, r := range h {
		if want := int64(beats - 1 - i); r.SinkErrors != want {
			t.Fatalf("record %d is heartbeat %d, want %d: every heartbeat recorded once, newest first", i, r.SinkErrors, want)
		}
	}
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var rows int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM cluster_heartbeats WHERE cluster = 'alpha'`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows < store.HistoryLimit || rows > store.HistoryLimit+15 {
		t.Fatalf("the table holds %d records of alpha, want %d to %d", rows, store.HistoryLimit, store.HistoryLimit+15)
	}
	c, err := a.GetCluster(ctx, "alpha")
	if err != nil {
		t.Fatal(err)
	}
	if !c.LastHeartbeat.Equal(last) {
		t.Fatalf("last heartbeat %v, want %v", c.LastHeartbeat, last)
	}

	// beta's marks are cached on a; b revokes it.
	beat := func(s *sqlstore.Store, at time.Time) error {
		return s.RecordHeartbeat(ctx, store.Heartbeat{Cluster: "beta", At: at, Status: "{}"})
	}
	if err := beat(a, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := b.RevokeCluster(ctx, "beta"); err != nil {
		t.Fatal(err)
	}
	if err := beat(a, t0.Add(2*time.Second)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a heartbeat of a cluster revoked through the other replica: %v, want not found", err)
	}
}
