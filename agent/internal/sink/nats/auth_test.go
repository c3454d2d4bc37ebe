package nats

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
	"kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// testCA writes a CA and a server certificate for 127.0.0.1 signed by it; it returns the CA
// PEM and the server's certificate and key files.
func testCA(t *testing.T) (caPEM []byte, certFile, keyFile string) {
	t.Helper()
	caPEM, certFile, keyFile, err := testenv.ServerCertificate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return caPEM, certFile, keyFile
}

// TestNKeyOverTLSWithCustomCA authenticates with an nkey seed from a Secret over TLS verified
// with a CA from a Secret; a server certificate from an unknown CA is terminal.
func TestNKeyOverTLSWithCustomCA(t *testing.T) {
	caPEM, certFile, keyFile := testCA(t)
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := user.Seed()
	pub, _ := user.PublicKey()
	srv, err := testenv.StartNATS(testenv.NATSOptions{CertFile: certFile, KeyFile: keyFile,
		Config: fmt.Sprintf("authorization { users = [ { nkey: %q } ] }\n", pub)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	store := map[string]map[string][]byte{"nkey": {"nkey": seed}, "ca": {"ca.crt": caPEM}}
	env := sink.Env{Cluster: "c1", Namespace: "kollect", Name: "events", Secrets: sinktest.Secrets(store)}
	sp := spec(srv.URL, "SECURE", "secure")
	sp.NATS.SecretRef = &v1alpha1.SecretReference{Name: "nkey"}
	sp.NATS.TLS = &v1alpha1.TLSConfig{Enabled: true, CASecretRef: &v1alpha1.SecretKeySelector{Name: "ca", Key: "ca.crt"}}
	sk := newSink(t, sp, env)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := sk.Probe(ctx); err != nil {
		t.Fatalf("probe: %v", err)
	}
	var ex exporter
	s := export.NewSnapshot([]export.Row{row("a", 1), row("b", 2)})
	if err := ex.Export(ctx, sk, s); err != nil {
		t.Fatal(err)
	}
	untrusted := *sp.NATS
	untrusted.TLS = &v1alpha1.TLSConfig{Enabled: true}
	sp2 := *sp
	sp2.NATS = &untrusted
	short, cancel2 := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel2()
	if err := newSink(t, &sp2, env).Probe(short); err == nil || sink.ClassOf(err) != sink.Terminal {
		t.Fatalf("probe of a certificate from an unknown CA: %v, want terminal", err)
	}
}
