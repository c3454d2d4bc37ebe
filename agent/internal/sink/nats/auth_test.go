package nats

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"kollect.dev/agent/internal/export"
	"kollect.dev/api/v1alpha1"
	"kollect.dev/e2e/testenv"
)

// testCA writes a CA and a server certificate for 127.0.0.1 signed by it; it returns the CA
// PEM and the server's certificate and key files.
func testCA(t *testing.T) (caPEM []byte, certFile, keyFile string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kollect test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), certFile, keyFile
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
	env := export.Env{Cluster: "c1", Namespace: "kollect", Name: "events", Secrets: secrets(store)}
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
	if err := ex.export(ctx, sk, s); err != nil {
		t.Fatal(err)
	}
	untrusted := *sp.NATS
	untrusted.TLS = &v1alpha1.TLSConfig{Enabled: true}
	sp2 := *sp
	sp2.NATS = &untrusted
	short, cancel2 := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel2()
	if err := newSink(t, &sp2, env).Probe(short); err == nil || export.ClassOf(err) != export.Terminal {
		t.Fatalf("probe of a certificate from an unknown CA: %v, want terminal", err)
	}
}
