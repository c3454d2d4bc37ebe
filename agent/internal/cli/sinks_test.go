package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	bq "cloud.google.com/go/bigquery"
	"github.com/jackc/pgx/v5"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/bigquery"
	"kollect.dev/agent/internal/sink/mongodb"
	"kollect.dev/agent/internal/sink/postgres"
	"kollect.dev/agent/internal/sink/sinktest"
	"kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// purgeFixture is one database sink under test: the flags that name it, the agent's sink of a
// cluster, and what the server itself says (never through the code under test): a cluster's
// rows, coverage entries and state records, and a fingerprint of everything it holds of a
// cluster that any rewrite changes.
type purgeFixture struct {
	flags       []string
	sinkOf      func(cluster string) sink.Sink
	counts      func(cluster string) [3]int
	fingerprint func(cluster string) string
	// objects: a snapshot or event sink, whose report has an OBJECTS column (its case
	// stores one object per row: a document, a key).
	objects bool
}

// totals is the report's summary of what it counts, as the command prints it.
func (fx purgeFixture) totals(rows, cov, states int) string {
	if fx.objects {
		return fmt.Sprintf("%d rows, %d coverage entries, %d state records and %d objects", rows, cov, states, rows)
	}
	return fmt.Sprintf("%d rows, %d coverage entries and %d state records", rows, cov, states)
}

// seed exports, as each cluster's agent did three hours ago, shop/workloads (3 rows) and
// shop/services (2 rows) of east and shop/workloads of west, each with a coverage entry.
// It returns the exporter of east's shop/workloads.
func seed(t *testing.T, fx purgeFixture) *sinktest.Exporter {
	t.Helper()
	ctx := context.Background()
	var keep *sinktest.Exporter
	for _, inv := range []struct {
		cluster, inventory string
		n                  int
	}{{"east", "shop/workloads", 3}, {"east", "shop/services", 2}, {"west", "shop/workloads", 3}} {
		s := fx.sinkOf(inv.cluster)
		e := &sinktest.Exporter{Cluster: inv.cluster, Inventory: inv.inventory,
			Writer: export.Writer{Version: "v0.1.0", Instance: "kollect-system@" + inv.cluster}}
		next := export.NewSnapshot(sinktest.Deployments(inv.cluster, inv.inventory, inv.n, 1))
		b := e.Batch(next)
		b.Envelope.ExportedAt = time.Now().Add(-3 * time.Hour)
		b.Envelope.Coverage = []export.Coverage{sinktest.Complete("deployments", int64(inv.n))}
		if err := s.Export(ctx, b); err != nil {
			t.Fatal(err)
		}
		e.Accepted = next
		s.Close()
		if inv.cluster == "east" && inv.inventory == "shop/workloads" {
			keep = e
		}
	}
	return keep
}

// testPurge runs the command's whole story against one sink: a dry run that removes nothing,
// a refusal while east's agent has just confirmed, a purge of one retired inventory, a forced
// purge of the rest, and errors for a cluster the sink holds nothing of; west stays as it was.
func testPurge(t *testing.T, fx purgeFixture) {
	workloads := seed(t, fx)
	purge := func(args ...string) (string, string, int) {
		t.Helper()
		return run(t, "", append(append([]string{"sinks", "purge"}, fx.flags...), args...)...)
	}
	west := fx.fingerprint("west")
	if fx.counts("east") != [3]int{5, 2, 2} || fx.counts("west") != [3]int{3, 1, 1} {
		t.Fatalf("seeded east %v, west %v", fx.counts("east"), fx.counts("west"))
	}

	// A dry run prints per inventory what would go, and removes nothing.
	out, errOut, code := purge("--cluster", "east", "--dry-run")
	if code != ExitOK {
		t.Fatalf("dry run: exit %d: %s", code, errOut)
	}
	wants := []string{
		"CLUSTER  INVENTORY       ROWS  COVERAGE  STATE  CHANGED",
		"east     shop/services   2     1         1      ",
		"east     shop/workloads  3     1         1      ",
	}
	if fx.objects {
		wants = []string{
			"CLUSTER  INVENTORY       ROWS  COVERAGE  STATE  OBJECTS  CHANGED",
			"east     shop/services   2     1         1      2        ",
			"east     shop/workloads  3     1         1      3        ",
		}
	}
	for _, want := range append(wants, "v0.1.0 kollect-system@east  yes",
		"dry run: nothing removed; a purge would remove "+fx.totals(5, 2, 2)+" of cluster east from ") {
		if !strings.Contains(out, want) {
			t.Fatalf("dry run output lacks %q:\n%s", want, out)
		}
	}
	if got := fx.counts("east"); got != [3]int{5, 2, 2} {
		t.Fatalf("the dry run removed something: east holds %v", got)
	}

	// east's agent confirms shop/workloads now: it is alive, and the purge refuses.
	s := fx.sinkOf("east")
	err := s.(sink.Confirmer).Confirm(context.Background(), sink.Confirmation{Cluster: "east", Inventory: "shop/workloads",
		Checksum: workloads.Accepted.Checksum, At: time.Now(), Writer: workloads.Writer})
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, code = purge("--cluster", "east")
	if code != ExitFindings || out != "" {
		t.Fatalf("purge of a cluster confirmed just now: exit %d, want %d\n%s%s", code, ExitFindings, out, errOut)
	}
	for _, want := range []string{"refusing to purge cluster east", "inventory shop/workloads: confirmed ", "s ago (",
		"by v0.1.0 kollect-system@east", "--retired-after 1h0m0s", "--force"} {
		if !strings.Contains(errOut, want) {
			t.Fatalf("the refusal lacks %q:\n%s", want, errOut)
		}
	}
	if strings.Contains(errOut, "shop/services") {
		t.Fatalf("the refusal names the retired inventory too:\n%s", errOut)
	}
	if got := fx.counts("east"); got != [3]int{5, 2, 2} {
		t.Fatalf("a refused purge removed something: east holds %v", got)
	}
	out, _, code = purge("--cluster", "east", "--dry-run", "-o", "json")
	var rep purgeReport
	if code != ExitOK || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Inventories) != 2 ||
		!rep.Inventories[0].Retired || rep.Inventories[1].Retired || rep.Inventories[1].Inventory != "shop/workloads" ||
		rep.Inventories[1].Rows != 3 || rep.Inventories[1].Writer.Version != "v0.1.0" || rep.Removed {
		t.Fatalf("dry run as JSON (exit %d):\n%s", code, out)
	}

	// The retired inventory goes on its own.
	out, errOut, code = purge("--cluster", "east", "--inventory", "shop/services")
	if code != ExitOK || !strings.Contains(out, "removed "+fx.totals(2, 1, 1)+" of cluster east inventory shop/services") {
		t.Fatalf("purge of east's shop/services: exit %d\n%s%s", code, out, errOut)
	}
	if got := fx.counts("east"); got != [3]int{3, 1, 1} {
		t.Fatalf("after purging shop/services east holds %v", got)
	}

	// --force purges the live one too.
	out, errOut, code = purge("--cluster", "east", "--force", "-o", "json")
	rep = purgeReport{}
	if code != ExitOK || json.Unmarshal([]byte(out), &rep) != nil || !rep.Removed || len(rep.Inventories) != 1 ||
		rep.Inventories[0].Rows != 3 || rep.Inventories[0].CoverageEntries != 1 || rep.Inventories[0].StateRecords != 1 {
		t.Fatalf("forced purge of east: exit %d\n%s%s", code, out, errOut)
	}
	if got := fx.counts("east"); got != [3]int{} {
		t.Fatalf("after the purge east holds %v", got)
	}
	if got := fx.fingerprint("west"); got != west {
		t.Fatalf("purging east touched west:\nbefore %s\nafter  %s", west, got)
	}
	if got := fx.counts("west"); got != [3]int{3, 1, 1} {
		t.Fatalf("west holds %v", got)
	}

	// Nothing held: a clear error, exit 1.
	for _, cluster := range []string{"east", "nope"} {
		_, errOut, code = purge("--cluster", cluster)
		if code != ExitFindings || !strings.Contains(errOut, "cluster "+cluster+": nothing held in ") {
			t.Fatalf("purge of %s, which the sink holds nothing of: exit %d: %s", cluster, code, errOut)
		}
	}
	if _, _, code := purge(); code != ExitUsage {
		t.Fatalf("purge without --cluster: exit %d, want %d", code, ExitUsage)
	}
}

// TestSinksPurgePostgres purges a cluster from a PostgreSQL sink two agents exported to, and
// reads the result back with psql.
func TestSinksPurgePostgres(t *testing.T) {
	pg, err := testenv.StartPostgres()
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Stop()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	scalar := func(sql string, args ...any) string {
		var s *string
		if err := conn.QueryRow(ctx, sql, args...).Scan(&s); err != nil {
			t.Fatal(err)
		}
		if s == nil {
			return ""
		}
		return *s
	}
	fx := purgeFixture{
		flags: []string{"--postgres", pg.URL},
		sinkOf: func(cluster string) sink.Sink {
			s, err := postgres.New(ctx, &v1alpha1.KollectDatabaseSink{Spec: v1alpha1.KollectDatabaseSinkSpec{Type: v1alpha1.DatabaseSinkPostgres,
				Postgres: &v1alpha1.PostgresSinkConfig{Host: "127.0.0.1", Port: int32(pg.Port), Database: "postgres",
					Schema: "kollect", Table: "rows", SSLMode: "disable", SecretRef: v1alpha1.SecretReference{Name: "pg"},
					StatementTimeout: metav1.Duration{Duration: 10 * time.Second}, MaxConnections: 2}}},
				sink.Env{Cluster: cluster, Namespace: "shop", Name: "db", Secrets: secretsOf(map[string]string{"username": "postgres", "password": "x"})})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		counts: func(cluster string) [3]int {
			var out [3]int
			for i, table := range []string{"kollect.rows", "kollect.rows_coverage", "kollect.rows_state"} {
				if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE cluster = $1", cluster).Scan(&out[i]); err != nil {
					t.Fatal(err)
				}
			}
			return out
		},
		// xmin and updated_at (confirmed_at for the state): a rewritten row gets new ones.
		fingerprint: func(cluster string) string {
			return scalar(`SELECT concat_ws(' | ',
  (SELECT string_agg(inventory || '/' || uid || '@' || xmin::text || '@' || updated_at::text, ',' ORDER BY inventory, uid) FROM kollect.rows WHERE cluster = $1),
  (SELECT string_agg(inventory || '/' || target || '@' || xmin::text || '@' || updated_at::text, ',' ORDER BY inventory, target) FROM kollect.rows_coverage WHERE cluster = $1),
  (SELECT string_agg(inventory || '@' || xmin::text || '@' || confirmed_at::text, ',' ORDER BY inventory) FROM kollect.rows_state WHERE cluster = $1))`, cluster)
		},
	}
	testPurge(t, fx)

	// psql, a client we did not write, agrees: only west is left, whole.
	out, err := exec.Command("psql", pg.URL, "-XAtc", `SELECT 'rows', cluster, count(*) FROM kollect.rows GROUP BY cluster
UNION ALL SELECT 'coverage', cluster, count(*) FROM kollect.rows_coverage GROUP BY cluster
UNION ALL SELECT 'state', cluster, count(*) FROM kollect.rows_state GROUP BY cluster ORDER BY 1, 2`).CombinedOutput()
	if err != nil {
		t.Fatalf("psql: %v: %s", err, out)
	}
	if got, want := strings.TrimSpace(string(out)), "coverage|west|1\nrows|west|3\nstate|west|1"; got != want {
		t.Fatalf("psql reads after the purge\n%s\nwant\n%s", got, want)
	}
	if _, errOut, code := run(t, "", "sinks", "purge", "--cluster", "east", "--postgres", "postgres://postgres@127.0.0.1:1/x?connect_timeout=2"); code != ExitUsage ||
		!strings.Contains(errOut, "connecting to PostgreSQL") {
		t.Fatalf("unreachable database: exit %d, %s", code, errOut)
	}
}

// TestSinksPurgeMongoDB does the same against the MongoDB-wire server.
func TestSinksPurgeMongoDB(t *testing.T) {
	m, err := testenv.StartMongo()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	ctx := context.Background()
	client, err := mongo.Connect(options.Client().ApplyURI(m.URI))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Disconnect(ctx)
	db := client.Database("inventory")
	testPurge(t, purgeFixture{
		flags: []string{"--mongodb", m.URI, "--database", "inventory"},
		sinkOf: func(cluster string) sink.Sink {
			s, err := mongodb.New(ctx, &v1alpha1.KollectDatabaseSink{Spec: v1alpha1.KollectDatabaseSinkSpec{Type: v1alpha1.DatabaseSinkMongoDB,
				MongoDB: &v1alpha1.MongoDBSinkConfig{URI: m.URI, Database: "inventory", Collection: "rows"}}},
				sink.Env{Cluster: cluster, Namespace: "shop", Name: "mongo"})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		counts: func(cluster string) [3]int {
			var out [3]int
			for i, name := range []string{"rows", "rows_coverage", "rows_state"} {
				n, err := db.Collection(name).CountDocuments(ctx, bson.D{{Key: "cluster", Value: cluster}})
				if err != nil {
					t.Fatal(err)
				}
				out[i] = int(n)
			}
			return out
		},
		// Every document in full (updated_at and confirmed_at included).
		fingerprint: func(cluster string) string {
			out := ""
			for _, name := range []string{"rows", "rows_coverage", "rows_state"} {
				cur, err := db.Collection(name).Find(ctx, bson.D{{Key: "cluster", Value: cluster}}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
				if err != nil {
					t.Fatal(err)
				}
				var docs []bson.M
				if err := cur.All(ctx, &docs); err != nil {
					t.Fatal(err)
				}
				js, err := json.Marshal(docs) // sorted keys: the server's field order is not the point
				if err != nil {
					t.Fatal(err)
				}
				out += name + ": " + string(js) + "\n"
			}
			return out
		},
	})
}

// TestSinksPurgeBigQuery does the same against the BigQuery emulator (--endpoint).
func TestSinksPurgeBigQuery(t *testing.T) {
	srv, err := testenv.StartBigQuery("fleet")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	ctx := context.Background()
	admin, err := bq.NewClient(ctx, srv.Project, option.WithEndpoint(srv.Endpoint), option.WithoutAuthentication())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	query := func(sql string) [][]bq.Value {
		it, err := admin.Query(sql).Read(ctx)
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		var out [][]bq.Value
		for {
			var row []bq.Value
			err := it.Next(&row)
			if errors.Is(err, iterator.Done) {
				return out
			}
			if err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
			out = append(out, row)
		}
	}
	table := func(name string) string { return fmt.Sprintf("`%s.inventory.%s`", srv.Project, name) }
	testPurge(t, purgeFixture{
		flags: []string{"--bigquery", srv.Project, "--dataset", "inventory", "--endpoint", srv.Endpoint},
		sinkOf: func(cluster string) sink.Sink {
			s, err := bigquery.New(ctx, &v1alpha1.KollectDatabaseSink{Spec: v1alpha1.KollectDatabaseSinkSpec{Type: v1alpha1.DatabaseSinkBigQuery,
				BigQuery: &v1alpha1.BigQuerySinkConfig{Project: srv.Project, Dataset: "inventory", Location: "EU", Endpoint: srv.Endpoint}}},
				sink.Env{Cluster: cluster, Namespace: "shop", Name: "bq"})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		counts: func(cluster string) [3]int {
			var out [3]int
			for i, name := range []string{"rows", "rows_coverage", "rows_state"} {
				out[i] = int(query(fmt.Sprintf("SELECT COUNT(*) FROM %s WHERE cluster = '%s'", table(name), cluster))[0][0].(int64))
			}
			return out
		},
		fingerprint: func(cluster string) string {
			return fmt.Sprint(
				query(fmt.Sprintf("SELECT inventory, uid, TO_JSON_STRING(attributes), first_seen, updated_at FROM %s WHERE cluster = '%s' ORDER BY inventory, uid", table("rows"), cluster)),
				query(fmt.Sprintf("SELECT inventory, target, state, updated_at FROM %s WHERE cluster = '%s' ORDER BY inventory, target", table("rows_coverage"), cluster)),
				query(fmt.Sprintf("SELECT inventory, checksum, exported_at, confirmed_at FROM %s WHERE cluster = '%s' ORDER BY inventory", table("rows_state"), cluster)))
		},
	})
}
