package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// The API server is replaced by controller-runtime's fake client here: the manager only
// reads and writes a Secret and a webhook configuration, and the admission tests already run
// a real API server with certificates.
func newFixture(t *testing.T) (client.Client, *Manager, *time.Time) {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "kollect-agent"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "a.kollect.dev"}, {Name: "b.kollect.dev"}}}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(cfg).Build()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m, err := New(Options{Client: c, Namespace: "kollect-system", SecretName: "tls", WebhookConfigName: "kollect-agent",
		DNSNames: []string{"kollect-agent-webhook.kollect-system.svc"}, CertDir: t.TempDir(),
		CAValidity: 300 * 24 * time.Hour, CertValidity: 30 * 24 * time.Hour, Now: func() time.Time { return now }, Log: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	return c, m, &now
}

func state(t *testing.T, c client.Client, m *Manager) (*corev1.Secret, []byte, []byte) {
	t.Helper()
	sec := &corev1.Secret{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "kollect-system", Name: "tls"}, sec); err != nil {
		t.Fatal(err)
	}
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: "kollect-agent"}, cfg); err != nil {
		t.Fatal(err)
	}
	for _, w := range cfg.Webhooks[1:] {
		if !bytes.Equal(w.ClientConfig.CABundle, cfg.Webhooks[0].ClientConfig.CABundle) {
			t.Fatal("webhooks carry different CA bundles")
		}
	}
	crt, err := os.ReadFile(filepath.Join(m.o.CertDir, "tls.crt"))
	if err != nil {
		t.Fatal(err)
	}
	return sec, cfg.Webhooks[0].ClientConfig.CABundle, crt
}

// served checks that a TLS server using the files in CertDir is trusted through caBundle.
func served(t *testing.T, m *Manager, caBundle []byte) {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(filepath.Join(m.o.CertDir, "tls.crt"), filepath.Join(m.o.CertDir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	srv.StartTLS()
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caBundle)
	// The certificate's clock is the fixture's; verify at that time through VerifyConnection.
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: pool, DNSName: m.o.DNSNames[0], CurrentTime: m.o.Now()})
			return err
		}}}}
	resp, err := cl.Get(srv.URL)
	if err != nil {
		t.Fatalf("serving certificate not trusted through the CA bundle: %v", err)
	}
	_ = resp.Body.Close()
}

func TestIssueRenewAndRotate(t *testing.T) {
	c, m, now := newFixture(t)
	ctx := context.Background()
	if err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	sec, bundle1, crt1 := state(t, c, m)
	if !bytes.Equal(bundle1, sec.Data["ca.crt"]) {
		t.Fatal("caBundle is not the CA")
	}
	served(t, m, bundle1)

	// Nothing is due: nothing changes.
	*now = now.Add(24 * time.Hour)
	if err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if _, b, crt := state(t, c, m); !bytes.Equal(crt, crt1) || !bytes.Equal(b, bundle1) {
		t.Fatal("certificate or bundle changed before renewal was due")
	}

	// Two thirds of the serving certificate's life: a new one from the same CA.
	*now = now.Add(20 * 24 * time.Hour)
	if err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	_, bundle2, crt2 := state(t, c, m)
	if bytes.Equal(crt2, crt1) || !bytes.Equal(bundle2, bundle1) {
		t.Fatal("serving certificate not renewed, or the CA changed with it")
	}
	served(t, m, bundle2)

	// Two thirds of the CA's life: a new CA; the old one stays in the bundle while valid.
	*now = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(250 * 24 * time.Hour)
	if err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	sec3, bundle3, _ := state(t, c, m)
	if !bytes.HasPrefix(bundle3, sec3.Data["ca.crt"]) || !bytes.Contains(bundle3, bundle1) {
		t.Fatal("bundle after CA rotation must hold the new and the previous CA")
	}
	served(t, m, sec3.Data["ca.crt"])

	// Once the previous CA has expired it leaves the bundle.
	*now = now.Add(60 * 24 * time.Hour)
	if err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if sec4, bundle4, _ := state(t, c, m); !bytes.Equal(bundle4, sec4.Data["ca.crt"]) {
		t.Fatal("expired CA still in the bundle")
	}
}

func TestSecondReplicaReusesTheChain(t *testing.T) {
	c, m, _ := newFixture(t)
	if err := m.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, bundle, crt := state(t, c, m)
	other := *m
	other.o.CertDir = t.TempDir()
	if err := other.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(other.o.CertDir, "tls.crt"))
	if err != nil || !bytes.Equal(got, crt) {
		t.Fatal("a second replica issued its own certificate instead of serving the shared one")
	}
	if _, b, _ := state(t, c, m); !bytes.Equal(b, bundle) {
		t.Fatal("bundle changed")
	}
}
