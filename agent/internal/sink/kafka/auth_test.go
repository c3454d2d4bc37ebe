package kafka

import (
	"context"
	"crypto/x509"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

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

// TestSASLOverTLSWithCustomCA runs every SASL mechanism over TLS verified with a CA from a
// Secret; wrong credentials and an untrusted certificate are terminal.
func TestSASLOverTLSWithCustomCA(t *testing.T) {
	caPEM, certFile, keyFile := testCA(t)
	k, err := testenv.StartKafka(testenv.KafkaOptions{User: "kollect", Password: "s3cret", CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	store := map[string]map[string][]byte{
		"creds": {"username": []byte("kollect"), "password": []byte("s3cret")},
		"wrong": {"username": []byte("kollect"), "password": []byte("nope")},
		"ca":    {"ca.crt": caPEM},
	}
	env := sink.Env{Cluster: "c1", Namespace: "kollect", Name: "events", Secrets: sinktest.Secrets(store)}
	withAuth := func(mech, secret string, tls *v1alpha1.TLSConfig) *v1alpha1.KollectEventSinkSpec {
		sp := spec(k.Addr, "secure")
		sp.Kafka.SASLMechanism = v1alpha1.SASLMechanism(mech)
		sp.Kafka.SecretRef = &v1alpha1.SecretReference{Name: secret}
		sp.Kafka.TLS = tls
		return sp
	}
	trusted := &v1alpha1.TLSConfig{Enabled: true, CASecretRef: &v1alpha1.SecretKeySelector{Name: "ca", Key: "ca.crt"}}
	for i, mech := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			sk := newSink(t, withAuth(mech, "creds", trusted), env)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			if err := sk.Probe(ctx); err != nil {
				t.Fatalf("probe: %v", err)
			}
			ex := exporter{Gen: int64(i * 10)}
			if err := ex.Export(ctx, sk, export.NewSnapshot([]export.Row{row(mech, i)})); err != nil {
				t.Fatal(err)
			}
			// kfake drops the connection on a failed authentication where Kafka answers
			// SASL_AUTHENTICATION_FAILED (terminal, see TestClassify); either way it must fail.
			bad := newSink(t, withAuth(mech, "wrong", trusted), env)
			if err := bad.Probe(ctx); err == nil {
				t.Fatal("probe with a wrong password succeeded")
			}
		})
	}
	untrusted := newSink(t, withAuth("PLAIN", "creds", &v1alpha1.TLSConfig{Enabled: true}), env)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := untrusted.Probe(ctx); err == nil || sink.ClassOf(err) != sink.Terminal {
		t.Fatalf("probe of a certificate signed by an unknown CA: %v, want terminal", err)
	}
	offs, err := newSink(t, withAuth("SCRAM-SHA-512", "creds", trusted), env).admin.ListEndOffsets(ctx, "secure")
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	offs.Each(func(o kadm.ListedOffset) { total += o.Offset })
	// Each mechanism's sink starts afresh (a full batch) with another row of the same
	// inventory: it reads the topic back over SASL and TLS and deletes the previous row.
	// PLAIN: 1 upsert; SCRAM-SHA-256 and -512: 1 upsert + 1 delete + 1 tombstone each; and
	// after each export the inventory's state record.
	if total != 10 {
		t.Fatalf("topic holds %d records, want 10", total)
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want sink.ErrorClass
	}{
		{fmt.Errorf("auth: %w", kerr.SaslAuthenticationFailed), sink.Terminal},
		{fmt.Errorf("produce: %w", kerr.TopicAuthorizationFailed), sink.Terminal},
		{fmt.Errorf("produce: %w", kerr.NotLeaderForPartition), sink.Transient},
		{fmt.Errorf("produce: %w", context.DeadlineExceeded), sink.Transient},
		{fmt.Errorf("dial: %w", x509.UnknownAuthorityError{}), sink.Terminal},
	} {
		if got := sink.ClassOf(classify(tc.err)); got != tc.want {
			t.Errorf("classify(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}
