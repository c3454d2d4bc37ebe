package sinks

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// TestPostgresHistoryThroughTheShippedAgent: the shipped kollect-agent, given
// docs/examples/database-postgres-history.yaml (only the connection and the Secret's
// credentials swapped for the test's PostgreSQL), keeps the history of a Deployment: psql reads
// its first version, closed at the instant its second one opened when the Deployment's image
// changed, and the documented function and the shipped `kollect query --as-of` return the old
// image at the first version's time and the new one after.
func TestPostgresHistoryThroughTheShippedAgent(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var (
		cp *testenv.ControlPlane
		pg *testenv.Postgres
	)
	must(t, parallel(controlPlane(t, "history", &cp), postgresServer(t, &pg)))
	pgURL, err := pg.CreateDatabase(ctx, pgDatabase)
	must(t, err)
	c := cp.Client
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sinkNS}}))
	// The platform's grant to the namespace (docs/tenancy.md): Deployments, any sink.
	must(t, c.Create(ctx, &kollectv1.KollectScope{ObjectMeta: metav1.ObjectMeta{Namespace: sinkNS, Name: "grant"},
		Spec: kollectv1.KollectScopeSpec{AllowedKinds: []kollectv1.GroupKindRule{{Group: "apps", Kind: "Deployment"}},
			AllowedNamespaces: []string{sinkNS}, AllowedSinks: []kollectv1.SinkRule{{Family: "*"}}}}))
	must(t, applyYAML(ctx, c, unverifiedGrant(sinkNS))) // the test PostgreSQL is plaintext
	root, err := testenv.RepoRoot()
	must(t, err)
	raw, err := os.ReadFile(filepath.Join(root, "docs", "examples", "database-postgres-history.yaml"))
	must(t, err)
	withHistory := false
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		obj, _, err := decoder.Decode([]byte(doc), nil, nil)
		must(t, err)
		o := obj.(client.Object)
		o.SetNamespace(sinkNS)
		switch x := o.(type) {
		case *corev1.Secret:
			x.StringData = map[string]string{"username": "postgres", "password": "unused-trust-auth"}
		case *kollectv1.KollectDatabaseSink:
			p := x.Spec.Postgres
			withHistory = p.History
			p.Host, p.Port, p.Database, p.SSLMode = "127.0.0.1", int32(pg.Port), pgDatabase, "disable"
		}
		must(t, c.Create(ctx, o))
	}
	if !withHistory {
		t.Fatal("the example's KollectDatabaseSink does not set history: true")
	}
	web := deployment(sinkNS, "web", 2, "registry.example/web:1.0")
	must(t, c.Create(ctx, web))
	a := newAgent(t, cp)
	a.start()

	db := &pgReader{url: pgURL}
	// versions: web's versions, oldest first: valid_from, valid_to ("open" while current),
	// images, in microseconds UTC.
	versions := func() ([][]string, error) {
		out, err := db.psql(ctx, `SELECT to_char(valid_from AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
       coalesce(to_char(valid_to AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), 'open'), attributes->>'images'
  FROM kollect.rows_history WHERE cluster = 'east' AND namespace = '`+sinkNS+`' AND name = 'web' ORDER BY valid_from`)
		if err != nil {
			return nil, err // before the agent's first export migrated the schema
		}
		var vs [][]string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if line != "" {
				vs = append(vs, strings.Split(line, "\t"))
			}
		}
		return vs, nil
	}
	var vs [][]string
	eventuallyT(t, 90*time.Second, "web's first version in rows_history", func() (bool, string) {
		var err error
		if vs, err = versions(); err != nil {
			inv := &kollectv1.KollectInventory{}
			_ = c.Get(ctx, client.ObjectKey{Namespace: sinkNS, Name: "pg-history-workloads"}, inv)
			return false, fmt.Sprintf("%v; the inventory's status: %+v", err, inv.Status)
		}
		return len(vs) == 1, strings.Join(flatten(vs), " ")
	})
	if vs[0][1] != "open" || !strings.Contains(vs[0][2], "web:1.0") {
		t.Fatalf("web's first version is %q, want an open one with web:1.0", vs[0])
	}

	must(t, c.Get(ctx, client.ObjectKeyFromObject(web), web))
	web.Spec.Template.Spec.Containers[0].Image = "registry.example/web:1.1"
	must(t, c.Update(ctx, web))
	eventuallyT(t, 90*time.Second, "web's second version in rows_history", func() (bool, string) {
		var err error
		if vs, err = versions(); err != nil {
			return false, err.Error()
		}
		return len(vs) == 2, strings.Join(flatten(vs), " ")
	})
	first, second := vs[0], vs[1]
	if first[1] != second[0] || second[1] != "open" || !strings.Contains(first[2], "web:1.0") || !strings.Contains(second[2], "web:1.1") {
		t.Fatalf("web's versions %q: want web:1.0 closed at the instant web:1.1 opened, web:1.1 open", vs)
	}
	t.Logf("web's versions: %q", vs)

	// The documented function, read with psql.
	imagesAt := func(at string) string {
		out, err := db.psql(ctx, `SELECT attributes->>'images' FROM kollect.rows_as_of('`+at+`') WHERE cluster = 'east' AND name = 'web'`)
		must(t, err)
		return strings.TrimSpace(out)
	}
	if got := imagesAt(first[0]); !strings.Contains(got, "web:1.0") {
		t.Fatalf("rows_as_of(%s) has web with %q, want web:1.0", first[0], got)
	}
	if got := imagesAt(second[0]); !strings.Contains(got, "web:1.1") {
		t.Fatalf("rows_as_of(%s) has web with %q, want web:1.1", second[0], got)
	}

	// The shipped CLI.
	built, err := testenv.BuildCommands(t.TempDir(), "", "./agent/cmd/kollect")
	must(t, err)
	query := func(args ...string) (string, string, int) {
		cmd := exec.CommandContext(ctx, built[0], append([]string{"query", "--postgres", pgURL}, args...)...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return stdout.String(), stderr.String(), code
	}
	for _, tc := range []struct{ at, want, not string }{
		{first[0], "web:1.0", "web:1.1"},
		{second[0], "web:1.1", "web:1.0"},
	} {
		out, errOut, code := query("--name", "web", "--as-of", tc.at, "-o", "ndjson")
		if code != 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, tc.want) || strings.Contains(out, tc.not) {
			t.Fatalf("kollect query --as-of %s: exit %d, %s%s; want web with %s", tc.at, code, out, errOut, tc.want)
		}
	}
	if _, errOut, code := query("--as-of", "3 November"); code != 2 || !strings.Contains(errOut, "want an RFC 3339 time") {
		t.Fatalf("kollect query --as-of '3 November': exit %d, %q; want exit 2 naming the accepted forms", code, errOut)
	}
}

func flatten(vs [][]string) []string {
	var out []string
	for _, v := range vs {
		out = append(out, strings.Join(v, ","))
	}
	return out
}
