package mongodb

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
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	v1alpha1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// server is the MongoDB-wire server (FerretDB) every test shares; each test uses its own
// database.
var server *testenv.Mongo

func TestMain(m *testing.M) {
	srv, err := testenv.StartMongo()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting FerretDB:", err)
		os.Exit(1)
	}
	server = srv
	code := m.Run()
	if code != 0 {
		// The server's side of a failure (FerretDB logs refused commands and panics).
		log := srv.Log()
		fmt.Fprintf(os.Stderr, "--- FerretDB log (last 8 KiB):\n%s\n", log[max(0, len(log)-8192):])
	}
	srv.Stop()
	os.Exit(code)
}

var dbSeq atomic.Int64

func newDatabase(tb testing.TB) string {
	name := strings.ToLower(regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(tb.Name(), "_"))
	if len(name) > 40 {
		name = name[:40]
	}
	return fmt.Sprintf("%s_%d", name, dbSeq.Add(1))
}

func spec(db string) *v1alpha1.MongoDBSinkConfig {
	return &v1alpha1.MongoDBSinkConfig{URI: server.URI, Database: db}
}

func testEnv(cluster string) sink.Env {
	return sink.Env{Cluster: cluster, Namespace: "kollect", Name: "mongo", Log: logr.Discard(),
		Secrets: func(context.Context, string) (map[string][]byte, error) {
			return nil, sink.Terminalf("no secrets here")
		}}
}

// recorder is a command monitor recording each command as "name collection"; onStart, when
// set, runs as a command starts (to interrupt an export there).
type recorder struct {
	mu      sync.Mutex
	cmds    []string
	onStart func(cmd string)
}

func (r *recorder) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		coll, _ := e.Command.Lookup(e.CommandName).StringValueOK()
		cmd := e.CommandName + " " + coll
		r.mu.Lock()
		r.cmds = append(r.cmds, cmd)
		hook := r.onStart
		r.mu.Unlock()
		if hook != nil {
			hook(cmd)
		}
	}}
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.cmds
	r.cmds = nil
	return out
}

func (r *recorder) setHook(h func(string)) {
	r.mu.Lock()
	r.onStart = h
	r.mu.Unlock()
}

// writes filters commands that change data or indexes.
func writes(cmds []string) []string {
	var out []string
	for _, c := range cmds {
		switch strings.Fields(c)[0] {
		case "insert", "update", "delete", "findAndModify", "createIndexes", "drop", "dropIndexes":
			out = append(out, c)
		}
	}
	return out
}

func newSink(tb testing.TB, db, cluster string) (*Sink, *recorder) {
	tb.Helper()
	rec := &recorder{}
	s, err := open(context.Background(), spec(db), testEnv(cluster), withMonitor(rec.monitor()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s, rec
}

// collection opens db.rows with a plain client for assertions.
func collection(tb testing.TB, db, name string) *mongo.Collection {
	tb.Helper()
	c, err := mongo.Connect(options.Client().ApplyURI(server.URI))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	return c.Database(db).Collection(name)
}

// agent mimics the delivery worker; see the postgres tests.
type agent struct {
	sink               *Sink
	cluster, inventory string
	prev, pending      *export.Snapshot
	lastChecksum       string
	writer             export.Writer
	// coverage is the next batches' coverage, as the delivery worker sends it.
	coverage []export.Coverage
}

func (a *agent) batch(rows []export.Row) *sink.Batch {
	next := export.NewSnapshot(append([]export.Row(nil), rows...))
	a.pending = next
	return &sink.Batch{
		Envelope: export.Envelope{SchemaVersion: export.SchemaVersion, Cluster: a.cluster, Inventory: a.inventory,
			ExportedAt: time.Now(), ItemCount: next.Len(), Checksum: next.Checksum, Rows: next.Rows, Writer: a.writer,
			Coverage: a.coverage},
		Diff:             export.Compute(a.prev, next),
		PreviousChecksum: a.lastChecksum,
	}
}

func (a *agent) accept() { a.prev, a.lastChecksum = a.pending, a.pending.Checksum }

func (a *agent) export(ctx context.Context, rows []export.Row) error {
	if err := a.sink.Export(ctx, a.batch(rows)); err != nil {
		return err
	}
	a.accept()
	return nil
}

// stored reads a cluster's documents: uid → canonical attributes, failing on duplicates.
func stored(tb testing.TB, coll *mongo.Collection, cluster string) map[string]string {
	tb.Helper()
	recs, err := Query(context.Background(), coll, sink.RowFilter{Cluster: cluster, Limit: 1 << 30})
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]string{}
	for _, r := range recs {
		if _, dup := out[r.UID]; dup {
			tb.Fatalf("duplicate row %s", r.UID)
		}
		out[r.UID] = string(r.Attributes)
	}
	return out
}

func countDocs(tb testing.TB, coll *mongo.Collection, filter bson.D) int64 {
	tb.Helper()
	n, err := coll.CountDocuments(context.Background(), filter)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}
