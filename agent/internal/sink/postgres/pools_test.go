package postgres

import (
	"context"
	"testing"

	"github.com/go-logr/logr"

	"kollect.dev/agent/internal/sink"
)

// TestConsumersOfOneSinkShareItsPool: the consumers of one sink object (an inventory's worker,
// the probe) share one pool, so PostgreSQL starts one session for both (its own count,
// pg_stat_database.sessions); another sink object, or the same one with other Secret
// contents, gets a pool of its own; closing one consumer leaves the other working.
func TestConsumersOfOneSinkShareItsPool(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	admin := connect(t, db)
	sessions := func() int64 {
		t.Helper()
		var n int64
		if err := admin.QueryRow(ctx, "SELECT sessions FROM pg_stat_database WHERE datname = $1", db).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// pg_stat_database is read from a snapshot per transaction; each QueryRow is its own.
	envOf := func(name, password string) sink.Env {
		return sink.Env{Cluster: "east", Namespace: "team", Name: name, Log: logr.Discard(),
			Secrets: func(context.Context, string) (map[string][]byte, error) {
				return map[string][]byte{"username": []byte("postgres"), "password": []byte(password)}, nil
			}}
	}
	openSink := func(env sink.Env) *Sink {
		t.Helper()
		s, err := open(ctx, spec(db), env)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	before := sessions()
	worker, probe := openSink(envOf("db", "a")), openSink(envOf("db", "a"))
	if worker.pool != probe.pool {
		t.Fatal("two consumers of one sink object built two pools")
	}
	if err := probe.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	probe.Close()
	a := &agent{sink: worker, cluster: "east", inventory: "apps"}
	if err := a.export(ctx, benchRows("east", "apps", 10, 1)); err != nil {
		t.Fatalf("the worker's export after the probe closed: %v", err)
	}
	if got := sessions() - before; got != 1 {
		t.Fatalf("a probe and an export of one sink started %d PostgreSQL sessions, want 1", got)
	}

	other, rotated := openSink(envOf("other-db", "a")), openSink(envOf("db", "b"))
	defer other.Close()
	defer rotated.Close()
	if other.pool == worker.pool || rotated.pool == worker.pool {
		t.Fatal("another sink object, or a rotated credential, shares the sink's pool")
	}
	worker.Close()
}
