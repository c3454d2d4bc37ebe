package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
)

// exportAt exports n Deployments of cluster's inventory, with their coverage entry, as an
// agent did at the time at.
func exportAt(t *testing.T, s *Sink, cluster, inventory string, n int, at time.Time) {
	t.Helper()
	a := &agent{sink: s, cluster: cluster, inventory: inventory,
		writer:   export.Writer{Version: "v0.1.0", Instance: "kollect-system@" + cluster},
		coverage: []export.Coverage{sinktest.Complete("deployments", int64(n))}}
	b := a.batch(sinktest.Deployments(cluster, inventory, n, 1))
	b.Envelope.ExportedAt = at
	if err := s.Export(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

// fingerprint is every row, coverage entry and state row of a cluster with its xmin and
// updated_at (confirmed_at for the state): any rewrite or removal changes it.
func fingerprint(t *testing.T, pool *pgxpool.Pool, cluster string) string {
	t.Helper()
	var s string
	err := pool.QueryRow(context.Background(), `SELECT concat_ws(' | ',
  (SELECT string_agg(inventory || '/' || target || '/' || uid || '@' || xmin::text || '@' || updated_at::text, ',' ORDER BY inventory, target, uid)
     FROM kollect.rows WHERE cluster = $1),
  (SELECT string_agg(inventory || '/' || target || '@' || xmin::text || '@' || updated_at::text, ',' ORDER BY inventory, target)
     FROM kollect.rows_coverage WHERE cluster = $1),
  (SELECT string_agg(inventory || '@' || xmin::text || '@' || confirmed_at::text, ',' ORDER BY inventory)
     FROM kollect.rows_state WHERE cluster = $1))`, cluster).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// held counts a cluster's rows, coverage entries and state rows.
func held(t *testing.T, pool *pgxpool.Pool, cluster string) [3]int {
	t.Helper()
	var out [3]int
	for i, table := range []string{"kollect.rows", "kollect.rows_coverage", "kollect.rows_state"} {
		out[i] = count(t, pool, "SELECT count(*) FROM "+table+" WHERE cluster = $1", cluster)
	}
	return out
}

// TestPurgeRemovesOneClusterOnly: Holdings reports per inventory what the tables hold; a
// cutoff before the agent's last write refuses and removes nothing; a purge of one
// inventory, then of the rest, removes exactly that cluster's rows, coverage and state and
// reports it, while the other cluster's rows keep their xmin and updated_at.
func TestPurgeRemovesOneClusterOnly(t *testing.T) {
	db := newDatabase(t)
	east, _ := newSink(t, db, "east")
	west, _ := newSink(t, db, "west")
	pool := connect(t, db)
	sinks := map[string]*Sink{"east": east, "west": west}
	sinktest.PurgeContract(t, sinktest.PurgeCase{East: east, West: west, Precision: time.Microsecond,
		Export: func(cluster, inventory string, n int, at time.Time) {
			exportAt(t, sinks[cluster], cluster, inventory, n, at)
		},
		Held: func(cluster string) [3]int64 {
			h := held(t, pool, cluster)
			return [3]int64{int64(h[0]), int64(h[1]), int64(h[2])}
		},
		Fingerprint: func(cluster string) string { return fingerprint(t, pool, cluster) },
	})
}

// TestPurgeChecksTheCutoffUnderTheExportLock: a purge waits for the advisory lock an export
// of the inventory holds, and judges the cutoff on what that export committed: an agent that
// confirmed meanwhile keeps its rows.
func TestPurgeChecksTheCutoffUnderTheExportLock(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	s, _ := newSink(t, db, "east")
	pool := connect(t, db)
	exportAt(t, s, "east", "apps", 5, time.Now().Add(-3*time.Hour))

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := lockInventory(ctx, tx, names{schema: "kollect", table: "rows"}, "east", "apps"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Purge(ctx, "east", "", time.Now().Add(-time.Hour))
		done <- err
	}()
	// The purge waits on the export's lock: PostgreSQL shows its request for the inventory's
	// advisory lock not granted, and the purge has not returned.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var waiting int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the purge did not wait for the export's lock: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("after 30 s the purge neither returned nor waits for an advisory lock")
		}
	}
	// The export holding the lock confirms, as a live agent's does, and commits.
	if _, err := tx.Exec(ctx, "UPDATE kollect.rows_state SET confirmed_at = now() WHERE cluster = 'east' AND inventory = 'apps'"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, sink.ErrNotRetired) {
			t.Fatalf("purge after a confirmation under the lock: %v, want ErrNotRetired", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the purge did not finish after the lock was released")
	}
	if got := held(t, pool, "east"); got != [3]int{5, 1, 1} {
		t.Fatalf("east holds %v after a refused purge", got)
	}
}
