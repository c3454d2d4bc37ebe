package postgres

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
	v1alpha1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

func TestProbeSucceedsWithoutWriting(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	s, rec := newSink(t, db, "east")
	if err := s.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	if w := writes(rec.take()); len(w) != 0 {
		t.Fatalf("probe wrote: %q", w)
	}
	if got := count(t, connect(t, db), `SELECT count(*) FROM pg_namespace WHERE nspname = 'kollect'`); got != 0 {
		t.Fatal("probe created the schema")
	}
}

func TestProbeClassifiesFailures(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	admin := connect(t, db)
	for _, q := range []string{
		`CREATE ROLE reader LOGIN`,
		`CREATE ROLE writer LOGIN`,
		`GRANT CREATE ON DATABASE "` + db + `" TO writer`,
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	closedPort, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		edit  func(*v1alpha1.PostgresSinkConfig)
		user  string
		class sink.ErrorClass
		msg   string
	}{
		{"unknown role is an auth failure", nil, "nobody", sink.Terminal, "nobody"},
		{"missing database", func(s *v1alpha1.PostgresSinkConfig) { s.Database = "nope" }, "postgres", sink.Terminal, "nope"},
		{"no privilege to create the schema", nil, "reader", sink.Terminal, "lacks CREATE on database"},
		{"connection refused", func(s *v1alpha1.PostgresSinkConfig) { s.Port = int32(closedPort) }, "postgres", sink.Transient, "connect"},
		{"TLS required but not offered", func(s *v1alpha1.PostgresSinkConfig) { s.SSLMode = "require" }, "postgres", sink.Terminal, "TLS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := spec(db)
			if tc.edit != nil {
				tc.edit(sp)
			}
			env := testEnv("east")
			env.Secrets = secrets(tc.user)
			s, err := open(ctx, sp, env)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			err = s.Probe(pctx)
			if err == nil {
				t.Fatal("probe succeeded")
			}
			if got := sink.ClassOf(err); got != tc.class {
				t.Fatalf("class %s, want %s: %v", got, tc.class, err)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %q does not mention %q", err, tc.msg)
			}
		})
	}

	// A role that may create the schema passes, and once another role owns the tables, a role
	// without table privileges fails.
	env := testEnv("east")
	env.Secrets = secrets("writer")
	w, err := open(ctx, spec(db), env)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Probe(ctx); err != nil {
		t.Fatalf("writer: %v", err)
	}
	if err := (&agent{sink: w, cluster: "east", inventory: "apps"}).export(ctx, sinktest.Deployments("east", "apps", 1, 1)); err != nil {
		t.Fatalf("writer export: %v", err)
	}
	if _, err := admin.Exec(ctx, `GRANT USAGE, CREATE ON SCHEMA kollect TO reader`); err != nil {
		t.Fatal(err)
	}
	env.Secrets = secrets("reader")
	r, err := open(ctx, spec(db), env)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Probe(ctx); sink.ClassOf(err) != sink.Terminal || err == nil || !strings.Contains(err.Error(), "lacks SELECT") {
		t.Fatalf("reader without table privileges: %v", err)
	}
}

func TestPreviewListsPendingDDLThenOnlyExportStatements(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	s, rec := newSink(t, db, "east")
	p, err := s.Preview(ctx, "east", "apps")
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(p.Statements, "\n")
	for _, want := range []string{`CREATE SCHEMA IF NOT EXISTS "kollect"`, `CREATE TABLE "kollect"."rows"`, `CREATE TABLE "kollect"."rows_state"`,
		`CREATE VIEW "kollect"."rows_image_usage"`, `DELETE FROM "kollect"."rows" WHERE cluster = 'east' AND inventory = 'apps'`} {
		if !strings.Contains(joined, want) {
			t.Errorf("preview lacks %s", want)
		}
	}
	if !strings.Contains(p.Message, "full load") || !strings.Contains(p.Destination, db) {
		t.Errorf("preview message %q destination %q", p.Message, p.Destination)
	}
	if w := writes(rec.take()); len(w) != 0 {
		t.Fatalf("preview wrote: %q", w)
	}
	if err := (&agent{sink: s, cluster: "east", inventory: "apps"}).export(ctx, sinktest.Deployments("east", "apps", 3, 1)); err != nil {
		t.Fatal(err)
	}
	p, err = s.Preview(ctx, "east", "apps")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.Join(p.Statements, "\n"), "CREATE TABLE") || !strings.Contains(p.Message, "holds 3 rows") {
		t.Fatalf("preview after migration: %q %q", p.Message, p.Statements)
	}

	// Unreachable: the full DDL and a message, no error.
	closedPort, _ := testenv.FreePort()
	sp := spec(db)
	sp.Port = int32(closedPort)
	off, err := open(ctx, sp, testEnv("east"))
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	p, err = off.Preview(ctx, "east", "apps")
	if err != nil || !strings.Contains(p.Message, "unreachable") || len(p.Statements) < 5 {
		t.Fatalf("offline preview: %v %q", err, p.Message)
	}
}

func TestResolveSettings(t *testing.T) {
	ctx := context.Background()
	caPEM := selfSignedCA(t)
	getter := func(_ context.Context, name string) (map[string][]byte, error) {
		switch name {
		case "pg":
			return map[string][]byte{"username": []byte("u"), "password": []byte("p@ss word")}, nil
		case "ca":
			return map[string][]byte{"ca.crt": caPEM}, nil
		}
		return nil, sink.Terminalf("no secret %s", name)
	}
	sp := &v1alpha1.PostgresSinkConfig{Host: "db.example", Database: "inv", SSLMode: "verify-full",
		SecretRef: v1alpha1.SecretReference{Name: "pg"}, StatementTimeout: metav1.Duration{Duration: 5 * time.Second},
		MaxConnections: 7, TLS: &v1alpha1.TLSConfig{CASecretRef: &v1alpha1.SecretKeySelector{Name: "ca", Key: "ca.crt"}, ServerName: "pg.internal"}}
	env := sink.Env{Namespace: "ns", Name: "s", Secrets: getter}
	st, err := resolve(ctx, sp, env)
	if err != nil {
		t.Fatal(err)
	}
	cc := st.poolConfig.ConnConfig
	if cc.User != "u" || cc.Password != "p@ss word" || cc.Port != 5432 || cc.Database != "inv" {
		t.Fatalf("connection settings %s %s %d %s", cc.User, cc.Password, cc.Port, cc.Database)
	}
	if st.begin.BeginQuery != "BEGIN; SET LOCAL statement_timeout = 5000" || st.poolConfig.MaxConns != 7 {
		t.Fatalf("begin %q max %d", st.begin.BeginQuery, st.poolConfig.MaxConns)
	}
	// Nothing a pooler in transaction mode would refuse or carry to another client: no startup
	// parameter but application_name, no named prepared statement (pooling.go).
	for param := range cc.RuntimeParams {
		if param != "application_name" {
			t.Errorf("startup parameter %s=%s", param, cc.RuntimeParams[param])
		}
	}
	if cc.DefaultQueryExecMode != pgx.QueryExecModeCacheDescribe || cc.StatementCacheCapacity != 0 ||
		st.poolConfig.MaxConnIdleTime != time.Minute {
		t.Fatalf("exec mode %s, statement cache %d, idle time %s", cc.DefaultQueryExecMode, cc.StatementCacheCapacity, st.poolConfig.MaxConnIdleTime)
	}
	sp.MaxConnections = 0
	if st, err := resolve(ctx, sp, env); err != nil || st.poolConfig.MaxConns != defaultMaxConnections {
		t.Fatalf("default pool size: %v", err)
	}
	sp.MaxConnections = 7
	if cc.TLSConfig == nil || cc.TLSConfig.RootCAs == nil || cc.TLSConfig.ServerName != "pg.internal" {
		t.Fatalf("TLS config %+v", cc.TLSConfig)
	}
	if st.schema != "kollect" || st.table != "rows" || strings.Contains(st.destination, "p@ss") {
		t.Fatalf("defaults %s.%s, destination %s", st.schema, st.table, st.destination)
	}

	sp.TLS.CASecretRef.Key = "missing"
	if _, err := resolve(ctx, sp, env); sink.ClassOf(err) != sink.Terminal {
		t.Fatalf("missing CA key: %v", err)
	}
	sp.TLS = nil
	sp.SecretRef.Name = "absent"
	if _, err := resolve(ctx, sp, env); sink.ClassOf(err) != sink.Terminal {
		t.Fatalf("missing secret: %v", err)
	}
	sp.SecretRef.Name = "pg"
	sp.SSLMode = "disable"
	if st, err := resolve(ctx, sp, env); err != nil || st.poolConfig.ConnConfig.TLSConfig != nil {
		t.Fatalf("sslmode disable: %v", err)
	}
	if _, err := open(ctx, &v1alpha1.PostgresSinkConfig{Host: "h", Database: "d", Table: strings.Repeat("t", 55),
		SecretRef: v1alpha1.SecretReference{Name: "pg"}}, env); sink.ClassOf(err) != sink.Terminal || err == nil {
		t.Fatalf("a table name too long for the view names: %v", err)
	}
}

func selfSignedCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
