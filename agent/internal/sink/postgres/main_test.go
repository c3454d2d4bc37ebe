package postgres

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	v1alpha1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// server is the PostgreSQL every test of this package shares; each test creates its own
// database on it.
var server *testenv.Postgres

func TestMain(m *testing.M) {
	pg, err := testenv.StartPostgres()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting PostgreSQL:", err)
		os.Exit(1)
	}
	server = pg
	code := m.Run()
	pg.Stop()
	os.Exit(code)
}

var dbSeq atomic.Int64

// newDatabase creates a fresh database named after the test.
func newDatabase(tb testing.TB) string {
	tb.Helper()
	name := strings.ToLower(regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(tb.Name(), "_"))
	if len(name) > 40 {
		name = name[:40]
	}
	name = fmt.Sprintf("%s_%d", name, dbSeq.Add(1))
	if _, err := server.CreateDatabase(context.Background(), name); err != nil {
		tb.Fatal(err)
	}
	return name
}

// bouncer, when set, is the PgBouncer in front of server that the sinks tests build connect
// through (TestContractThroughPgBouncer runs the package's tests so); assertions keep
// reading the server directly (connect).
var bouncer *testenv.PgBouncer

func spec(db string) *v1alpha1.PostgresSinkConfig {
	port := server.Port
	if bouncer != nil {
		port = bouncer.Port
	}
	return &v1alpha1.PostgresSinkConfig{
		Host: "127.0.0.1", Port: int32(port), Database: db, SSLMode: "disable",
		SecretRef: v1alpha1.SecretReference{Name: "pg"},
	}
}

func secrets(user string) sink.SecretGetter {
	return func(_ context.Context, name string) (map[string][]byte, error) {
		if name != "pg" {
			return nil, sink.Terminalf("secret %s not found", name)
		}
		return map[string][]byte{"username": []byte(user)}, nil
	}
}

// newSink builds a sink of cluster on database db, with a statement recorder.
func newSink(tb testing.TB, db, cluster string) (*Sink, *recorder) {
	tb.Helper()
	rec := &recorder{}
	s, err := open(context.Background(), spec(db), testEnv(cluster), withTracer(rec))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s, rec
}

func testEnv(cluster string) sink.Env {
	return sink.Env{Cluster: cluster, Namespace: "kollect", Name: "pg", Secrets: secrets("postgres"), Log: logr.Discard()}
}

// connect opens a plain pool on db for assertions.
func connect(tb testing.TB, db string) *pgxpool.Pool {
	tb.Helper()
	url := strings.Replace(server.URL, "/postgres?", "/"+db+"?", 1)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// recorder is a pgx tracer that records every statement, so tests can prove that an export
// wrote nothing. onCopy, when set, runs as a COPY starts (to interrupt it).
type recorder struct {
	mu     sync.Mutex
	stmts  []string
	onCopy func(ctx context.Context, conn *pgx.Conn)
}

func (r *recorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	r.stmts = append(r.stmts, strings.TrimSpace(d.SQL))
	r.mu.Unlock()
	return ctx
}

func (r *recorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *recorder) TraceCopyFromStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceCopyFromStartData) context.Context {
	r.mu.Lock()
	r.stmts = append(r.stmts, "COPY "+d.TableName.Sanitize())
	hook := r.onCopy
	r.mu.Unlock()
	if hook != nil {
		hook(ctx, conn)
	}
	return ctx
}

func (r *recorder) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

// take returns and clears the recorded statements.
func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.stmts
	r.stmts = nil
	return out
}

// writes filters statements that change data or schema.
func writes(stmts []string) []string {
	var out []string
	for _, s := range stmts {
		verb := strings.ToUpper(strings.Fields(s)[0])
		switch verb {
		case "INSERT", "UPDATE", "DELETE", "COPY", "CREATE", "ALTER", "DROP", "TRUNCATE", "MERGE":
			out = append(out, s)
		}
	}
	return out
}

// agent mimics the delivery worker: it diffs against the snapshot the sink accepted last and keeps
// the accepted checksum as the inventory's status would.
type agent struct {
	sink               *Sink
	cluster, inventory string
	prev, pending      *export.Snapshot
	lastChecksum       string
	writer             export.Writer
	// coverage is the next batches' coverage, as the delivery worker sends it.
	coverage []export.Coverage
}

// export sends rows as the next snapshot and remembers it when the sink accepted it.
func (a *agent) export(ctx context.Context, rows []export.Row) error {
	if err := a.sink.Export(ctx, a.batch(rows)); err != nil {
		return err
	}
	a.accept()
	return nil
}

func (a *agent) batch(rows []export.Row) *sink.Batch {
	next := export.NewSnapshot(append([]export.Row(nil), rows...))
	b := &sink.Batch{
		Envelope: export.Envelope{SchemaVersion: export.SchemaVersion, Cluster: a.cluster, Inventory: a.inventory,
			ExportedAt: time.Now(), ItemCount: next.Len(), Checksum: next.Checksum, Rows: next.Rows, Writer: a.writer,
			Coverage: a.coverage},
		Diff:             export.Compute(a.prev, next),
		PreviousChecksum: a.lastChecksum,
	}
	a.pending = next
	return b
}

// accept records that the last batch was committed.
func (a *agent) accept() {
	a.prev, a.lastChecksum = a.pending, a.pending.Checksum
}

// stored reads the keys and attributes of a cluster's rows, keyed by uid.
func stored(tb testing.TB, db *pgxpool.Pool, cluster string) map[string]string {
	tb.Helper()
	rows, err := db.Query(context.Background(), `SELECT uid, attributes::text FROM kollect.rows WHERE cluster = $1`, cluster)
	if err != nil {
		tb.Fatal(err)
	}
	// Closed on every return: a t.Fatal below with the rows open kept the connection
	// acquired, and the pool's Close in the cleanup waited for it until the test timeout.
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var uid, attrs string
		if err := rows.Scan(&uid, &attrs); err != nil {
			tb.Fatal(err)
		}
		if _, dup := out[uid]; dup {
			tb.Fatalf("duplicate row %s", uid)
		}
		out[uid] = attrs
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

func count(tb testing.TB, db *pgxpool.Pool, q string, args ...any) int {
	tb.Helper()
	var n int
	if err := db.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		tb.Fatal(err)
	}
	return n
}
