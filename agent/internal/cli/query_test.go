package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/mongodb"
	"kollect.dev/agent/internal/sink/postgres"
	"kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// fleetBatch is what two clusters exported: one Deployment of team a each and one of team b.
func fleetBatch(t *testing.T, cluster string) *sink.Batch {
	t.Helper()
	var rows []export.Row
	for _, d := range []struct{ name, team string }{{"web", "a"}, {"api", "b"}} {
		attrs, err := export.EncodeAttributes(map[string]any{"team": d.team, "replicas": int64(2)})
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, export.Row{Origin: &export.Origin{Cluster: cluster, Inventory: "shop/workloads", Target: "shop/deployments", Group: "apps", Version: "v1", Kind: "Deployment"}, Namespace: "shop", Name: d.name, UID: cluster + "-" + d.name, Attributes: attrs})
	}
	snap := export.NewSnapshot(rows)
	return &sink.Batch{
		Envelope: export.Envelope{SchemaVersion: export.SchemaVersion, Cluster: cluster, Inventory: "shop/workloads",
			ExportedAt: time.Now(), ItemCount: snap.Len(), Checksum: snap.Checksum, Rows: snap.Rows},
		Diff: export.Compute(nil, snap),
	}
}

func secretsOf(data map[string]string) sink.SecretGetter {
	return func(context.Context, string) (map[string][]byte, error) {
		out := map[string][]byte{}
		for k, v := range data {
			out[k] = []byte(v)
		}
		return out, nil
	}
}

// TestQueryPostgresAcrossClusters exports two clusters' rows with the real postgres sink and
// queries them back across the fleet with filters.
func TestQueryPostgresAcrossClusters(t *testing.T) {
	pg, err := testenv.StartPostgres()
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Stop()
	ctx := context.Background()
	for _, cluster := range []string{"east", "west"} {
		s, err := postgres.New(ctx, &v1alpha1.KollectDatabaseSink{Spec: v1alpha1.KollectDatabaseSinkSpec{Type: v1alpha1.DatabaseSinkPostgres,
			Postgres: &v1alpha1.PostgresSinkConfig{Host: "127.0.0.1", Port: int32(pg.Port), Database: "postgres",
				Schema: "kollect", Table: "rows", SSLMode: "disable", SecretRef: v1alpha1.SecretReference{Name: "pg"},
				StatementTimeout: metav1.Duration{Duration: 10 * time.Second}, MaxConnections: 2}}},
			sink.Env{Cluster: cluster, Namespace: "shop", Name: "db", Secrets: secretsOf(map[string]string{"username": "postgres", "password": "x"})})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Export(ctx, fleetBatch(t, cluster)); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	out, errOut, code := run(t, "", "query", "--postgres", pg.URL, "--kind", "Deployment", "--attr", "team=a", "-o", "ndjson")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"cluster":"east"`) || !strings.Contains(lines[1], `"cluster":"west"`) ||
		!strings.Contains(out, `"name":"web"`) || strings.Contains(out, `"name":"api"`) {
		t.Fatalf("query output:\n%s", out)
	}
	out, _, code = run(t, "", "query", "--postgres", pg.URL, "--cluster", "west")
	if code != 0 || strings.Count(out, "west") != 2 || strings.Contains(out, "east") {
		t.Fatalf("table for west (exit %d):\n%s", code, out)
	}
	if _, errOut, code := run(t, "", "query", "--postgres", "postgres://postgres@127.0.0.1:1/x?connect_timeout=2"); code != 2 || !strings.Contains(errOut, "connecting to PostgreSQL") {
		t.Fatalf("unreachable database: exit %d, %s", code, errOut)
	}
	if _, _, code := run(t, "", "query", "--kind", "Deployment"); code != 2 {
		t.Fatalf("no database given: exit %d, want 2", code)
	}
}

// TestQueryMongoDB does the same against the MongoDB-wire server.
func TestQueryMongoDB(t *testing.T) {
	m, err := testenv.StartMongo()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	ctx := context.Background()
	for _, cluster := range []string{"east", "west"} {
		s, err := mongodb.New(ctx, &v1alpha1.KollectDatabaseSink{Spec: v1alpha1.KollectDatabaseSinkSpec{Type: v1alpha1.DatabaseSinkMongoDB,
			MongoDB: &v1alpha1.MongoDBSinkConfig{URI: m.URI, Database: "inventory", Collection: "rows"}}},
			sink.Env{Cluster: cluster, Namespace: "shop", Name: "mongo"})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Export(ctx, fleetBatch(t, cluster)); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	out, errOut, code := run(t, "", "query", "--mongodb", m.URI, "--database", "inventory", "--name", "api", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if strings.Count(out, `"name": "api"`)+strings.Count(out, `"name":"api"`) != 2 || strings.Contains(out, `"web"`) {
		t.Fatalf("query output:\n%s", out)
	}
}

// TestQueryAsOf reads a postgres sink's history with --as-of: before a change the old row,
// after it the new one; bad times and a database without history are refused with a usage
// error that says what is expected.
func TestQueryAsOf(t *testing.T) {
	pg, err := testenv.StartPostgres()
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Stop()
	ctx := context.Background()
	s, err := postgres.New(ctx, &v1alpha1.KollectDatabaseSink{Spec: v1alpha1.KollectDatabaseSinkSpec{Type: v1alpha1.DatabaseSinkPostgres,
		Postgres: &v1alpha1.PostgresSinkConfig{Host: "127.0.0.1", Port: int32(pg.Port), Database: "postgres", Schema: "kollect",
			Table: "rows", SSLMode: "disable", SecretRef: v1alpha1.SecretReference{Name: "pg"}, MaxConnections: 2, History: true}}},
		sink.Env{Cluster: "east", Namespace: "shop", Name: "db", Secrets: secretsOf(map[string]string{"username": "postgres"})})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first := fleetBatch(t, "east")
	if err := s.Export(ctx, first); err != nil {
		t.Fatal(err)
	}
	var between time.Time
	if err := pgQueryRow(ctx, pg.URL, "SELECT clock_timestamp()", &between); err != nil {
		t.Fatal(err)
	}
	// web scales to 5: a diff on top of the first export.
	rows := append([]export.Row(nil), first.Envelope.Rows...)
	for i := range rows {
		if rows[i].Name == "web" {
			rows[i].Attributes, _ = export.EncodeAttributes(map[string]any{"team": "a", "replicas": int64(5)})
		}
	}
	snap := export.NewSnapshot(rows)
	prev := export.NewSnapshot(first.Envelope.Rows)
	second := &sink.Batch{Envelope: export.Envelope{SchemaVersion: export.SchemaVersion, Cluster: "east", Inventory: "shop/workloads",
		ExportedAt: time.Now(), ItemCount: snap.Len(), Checksum: snap.Checksum, Rows: snap.Rows},
		Diff: export.Compute(prev, snap), PreviousChecksum: prev.Checksum}
	if err := s.Export(ctx, second); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ at, replicas string }{
		{between.UTC().Format(time.RFC3339Nano), `"replicas":2`},
		{time.Now().Add(time.Hour).UTC().Format(time.RFC3339), `"replicas":5`},
	} {
		out, errOut, code := run(t, "", "query", "--postgres", pg.URL, "--name", "web", "--as-of", c.at, "-o", "ndjson")
		if code != 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, c.replicas) {
			t.Fatalf("--as-of %s: exit %d, %s%s, want web with %s", c.at, code, out, errOut, c.replicas)
		}
	}
	// A date is its midnight UTC: before this test's rows existed.
	if out, errOut, code := run(t, "", "query", "--postgres", pg.URL, "--as-of", "2001-02-03"); code != 0 || strings.Contains(out, "web") {
		t.Fatalf("--as-of 2001-02-03: exit %d, %s%s, want no row", code, out, errOut)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--postgres", pg.URL, "--as-of", "yesterday"}, `--as-of "yesterday": want an RFC 3339 time`},
		{[]string{"--postgres", pg.URL, "--as-of", "2026-11-03 14:00"}, "want an RFC 3339 time"},
		{[]string{"--mongodb", "mongodb://127.0.0.1:1", "--database", "x", "--as-of", "2026-11-03"}, "--as-of reads a PostgreSQL sink's history: it needs --postgres"},
		{[]string{"--postgres", pg.URL, "--table", "nohistory", "--as-of", "2026-11-03"}, "has no history function"},
	} {
		if _, errOut, code := run(t, "", append([]string{"query"}, c.args...)...); code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("query %v: exit %d, %q, want exit 2 and %q", c.args, code, errOut, c.want)
		}
	}
}

// pgQueryRow reads one value with a plain connection.
func pgQueryRow(ctx context.Context, url, q string, dest any) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.QueryRow(ctx, q).Scan(dest)
}
