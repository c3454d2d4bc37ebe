package bigquery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bq "cloud.google.com/go/bigquery"
	"github.com/go-logr/logr"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	v1alpha1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// server is the BigQuery emulator every test shares; each test uses its own dataset.
var server *testenv.BigQuery

func TestMain(m *testing.M) {
	srv, err := testenv.StartBigQuery("test")
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the BigQuery emulator:", err)
		os.Exit(1)
	}
	server = srv
	code := m.Run()
	if code != 0 {
		log := srv.Log()
		fmt.Fprintf(os.Stderr, "--- bigquery-emulator log (last 8 KiB):\n%s\n", log[max(0, len(log)-8192):])
	}
	srv.Stop()
	os.Exit(code)
}

var datasetSeq atomic.Int64

// newDataset names a dataset of the test's own.
func newDataset(tb testing.TB) string {
	name := strings.ToLower(regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(tb.Name(), "_"))
	return fmt.Sprintf("%.40s_%d", name, datasetSeq.Add(1))
}

func spec(dataset string) *v1alpha1.BigQuerySinkConfig {
	return &v1alpha1.BigQuerySinkConfig{Project: server.Project, Dataset: dataset, Location: "EU", Endpoint: server.Endpoint}
}

// recorder is the sink's HTTP transport in tests: it records every request to the emulator
// as a kind ("POST insertAll", "query script", ...) and can fail requests of a kind with an
// injected error response instead of forwarding them. The responses it does not inject are
// the emulator's.
type recorder struct {
	base    http.RoundTripper // the guarded transport the sink dials through
	mu      sync.Mutex
	calls   map[string]int
	fail    map[string]int // kind → injected failures left
	status  int
	reason  string
	message string // the injected error's message; "injected <reason>" when empty
	rejectN bool   // answer everything 401, as for revoked credentials
}

func newRecorder() *recorder { return &recorder{calls: map[string]int{}, fail: map[string]int{}} }

var (
	reInsertAll = regexp.MustCompile(`/tables/[^/]+/insertAll$`)
	reTable     = regexp.MustCompile(`/datasets/[^/]+/tables/[^/]+$`)
	reTables    = regexp.MustCompile(`/datasets/[^/]+/tables$`)
	reDataset   = regexp.MustCompile(`/datasets/[^/]+$`)
	reDatasets  = regexp.MustCompile(`/datasets$`)
	reQueries   = regexp.MustCompile(`/queries$`)
)

// kind names a request; for jobs.query it reads the SQL: "query state" (the state read),
// "query rows" (a resync's read of the rows), "query script" (the transaction) or "query other".
func kind(r *http.Request) (string, error) {
	p := r.URL.Path
	switch {
	case reInsertAll.MatchString(p):
		return r.Method + " insertAll", nil
	case reTable.MatchString(p):
		return r.Method + " table", nil
	case reTables.MatchString(p):
		return r.Method + " table", nil
	case reDataset.MatchString(p), reDatasets.MatchString(p):
		return r.Method + " dataset", nil
	case reQueries.MatchString(p) && r.Method == http.MethodPost:
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return "", err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		var q struct{ Query string }
		if err := json.Unmarshal(body, &q); err != nil {
			return "", err
		}
		switch {
		case strings.HasPrefix(q.Query, "SELECT checksum"):
			return "query state", nil
		case strings.HasPrefix(q.Query, "SELECT target, uid"):
			return "query rows", nil
		case strings.HasPrefix(q.Query, "BEGIN TRANSACTION"):
			return "query script", nil
		}
		return "query other", nil
	}
	return r.Method + " " + p, nil
}

func (rec *recorder) RoundTrip(r *http.Request) (*http.Response, error) {
	k, err := kind(r)
	if err != nil {
		return nil, err
	}
	rec.mu.Lock()
	rec.calls[k]++
	status, reason, message := 0, "", ""
	switch {
	case rec.rejectN:
		status, reason = http.StatusUnauthorized, "unauthorized"
	case rec.fail[k] > 0:
		rec.fail[k]--
		status, reason, message = rec.status, rec.reason, rec.message
	}
	rec.mu.Unlock()
	if status != 0 {
		if message == "" {
			message = "injected " + reason
		}
		return errorResponse(r, status, reason, message), nil
	}
	return rec.base.RoundTrip(r)
}

// errorResponse is the service's documented error body, which googleapi.CheckResponse parses.
func errorResponse(r *http.Request, status int, reason, message string) *http.Response {
	body, _ := json.Marshal(map[string]any{"error": map[string]any{"code": status, "message": message,
		"errors": []map[string]any{{"reason": reason, "message": message, "domain": "global"}}}})
	return &http.Response{StatusCode: status, Status: http.StatusText(status), Request: r, ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(bytes.NewReader(body))}
}

// Fail makes the next n requests of kind fail with status and reason.
func (rec *recorder) Fail(kind string, n, status int, reason string) {
	rec.FailWith(kind, n, status, reason, "")
}

// FailWith makes the next n requests of kind fail with status, reason and message.
func (rec *recorder) FailWith(kind string, n, status int, reason, message string) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.fail[kind], rec.status, rec.reason, rec.message = n, status, reason, message
}

// RejectAuth answers every request with 401 while on.
func (rec *recorder) RejectAuth(on bool) {
	rec.mu.Lock()
	rec.rejectN = on
	rec.mu.Unlock()
}

// Calls returns and resets the request counts.
func (rec *recorder) Calls() map[string]int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	out := rec.calls
	rec.calls = map[string]int{}
	return out
}

// mutations keeps the requests that change something: every request but reads of metadata
// and the state query.
func mutations(calls map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range calls {
		if !strings.HasPrefix(k, "GET ") && k != "query state" && k != "query rows" {
			out[k] = v
		}
	}
	return out
}

func newSink(tb testing.TB, dataset, cluster string) (*Sink, *recorder) {
	tb.Helper()
	rec := newRecorder()
	s, err := open(context.Background(), spec(dataset), sink.Env{Cluster: cluster, Namespace: "kollect", Name: "bq", Log: logr.Discard()},
		func(base http.RoundTripper) http.RoundTripper { rec.base = base; return rec })
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s, rec
}

// admin is a plain client for assertions and for drifting data behind the sink's back.
func admin(tb testing.TB) *bq.Client {
	tb.Helper()
	c, err := bq.NewClient(context.Background(), server.Project, option.WithEndpoint(server.Endpoint), option.WithoutAuthentication())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// storedRow is a row as read back from the emulator.
type storedRow struct {
	Cluster, Inventory, Target, UID, Name, Attributes string
	FirstSeen, UpdatedAt                              time.Time
}

// rowsOf reads the rows table of dataset, optionally of one cluster, ordered by cluster and uid.
func rowsOf(tb testing.TB, dataset, cluster string) []storedRow {
	tb.Helper()
	sql := "SELECT cluster, inventory, target, uid, name, TO_JSON_STRING(attributes), first_seen, updated_at FROM `" +
		server.Project + "." + dataset + ".rows`"
	if cluster != "" {
		sql += " WHERE cluster = '" + cluster + "'"
	}
	var out []storedRow
	for _, v := range query(tb, sql+" ORDER BY cluster, uid") {
		out = append(out, storedRow{Cluster: v[0].(string), Inventory: v[1].(string), Target: v[2].(string), UID: v[3].(string),
			Name: v[4].(string), Attributes: v[5].(string), FirstSeen: v[6].(time.Time), UpdatedAt: v[7].(time.Time)})
	}
	return out
}

func uids(tb testing.TB, dataset, cluster string) []string {
	var out []string
	for _, r := range rowsOf(tb, dataset, cluster) {
		out = append(out, r.UID)
	}
	return out
}

// query runs sql with the admin client and returns every row.
func query(tb testing.TB, sql string) [][]bq.Value {
	tb.Helper()
	it, err := admin(tb).Query(sql).Read(context.Background())
	if err != nil {
		tb.Fatalf("%s: %v", sql, err)
	}
	var out [][]bq.Value
	for {
		var row []bq.Value
		err := it.Next(&row)
		if errors.Is(err, iterator.Done) {
			return out
		}
		if err != nil {
			tb.Fatalf("%s: %v", sql, err)
		}
		out = append(out, row)
	}
}

// tables lists the tables of dataset.
func tables(tb testing.TB, dataset string) []string {
	tb.Helper()
	var out []string
	it := admin(tb).Dataset(dataset).Tables(context.Background())
	for {
		t, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, t.TableID)
	}
	slices.Sort(out)
	return out
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

func mkRow(cluster string, i int, attrs map[string]any) export.Row {
	raw, err := export.EncodeAttributes(attrs)
	if err != nil {
		panic(err)
	}
	return export.Row{Origin: &export.Origin{Cluster: cluster, Inventory: "apps", Target: "deployments", Group: "apps", Version: "v1", Kind: "Deployment"}, Namespace: "ns", Name: fmt.Sprintf("app-%03d", i), UID: fmt.Sprintf("%s-%03d", cluster, i), Attributes: raw}
}

func mkRows(cluster string, n, version int) []export.Row {
	rows := make([]export.Row, n)
	for i := range rows {
		rows[i] = mkRow(cluster, i, map[string]any{"image": fmt.Sprintf("app:%d", version), "replicas": i})
	}
	return rows
}
