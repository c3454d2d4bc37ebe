package postgres

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/agent/internal/sink"
	"kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// TestVerifyFullWithCAFromSecret connects with sslmode verify-full, and with require (which
// verifies the chain when given a CA, as libpq does), to a PostgreSQL that serves TLS,
// trusting the CA from a Secret; a CA that did not sign the server is a terminal error.
func TestVerifyFullWithCAFromSecret(t *testing.T) {
	pg, err := testenv.StartPostgresWith(testenv.PostgresOptions{TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Stop()
	otherCA, _, _, err := testenv.ServerCertificate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sinkWith := func(mode v1alpha1.PostgresSSLMode, ca []byte) *Sink {
		t.Helper()
		secrets := func(_ context.Context, name string) (map[string][]byte, error) {
			if name == "pg-ca" {
				return map[string][]byte{"ca.crt": ca}, nil
			}
			return map[string][]byte{"username": []byte("postgres"), "password": []byte("unused")}, nil
		}
		s, err := open(ctx, &v1alpha1.PostgresSinkConfig{Host: "127.0.0.1", Port: int32(pg.Port), Database: "postgres",
			Schema: "kollect", Table: "rows", SSLMode: mode, SecretRef: v1alpha1.SecretReference{Name: "pg"},
			TLS:              &v1alpha1.TLSConfig{CASecretRef: &v1alpha1.SecretKeySelector{Name: "pg-ca", Key: "ca.crt"}},
			StatementTimeout: metav1.Duration{Duration: 10 * time.Second}, MaxConnections: 2},
			sink.Env{Cluster: "east", Namespace: "ns", Name: "db", Secrets: secrets})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	for _, mode := range []v1alpha1.PostgresSSLMode{"verify-full", "require"} {
		if err := sinkWith(mode, pg.CAPEM).Probe(ctx); err != nil {
			t.Fatalf("%s with the server's CA: %v", mode, err)
		}
		err = sinkWith(mode, otherCA).Probe(ctx)
		if err == nil || sink.ClassOf(err) != sink.Terminal {
			t.Fatalf("%s with another CA: %v (class %s), want a terminal error", mode, err, sink.ClassOf(err))
		}
	}
}
