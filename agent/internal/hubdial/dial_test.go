package hubdial

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"kollect.dev/proto/capin"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"
)

// ca is a certificate authority made for one test.
type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

var serial atomic.Int64

func newCA(t *testing.T, name string) *ca {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &ca{cert: cert, key: key}
}

// leaf issues a serving certificate for hosts, valid from notBefore to notAfter, and returns
// it with the CA in its chain, as the hub serves it.
func (c *ca) leaf(t *testing.T, hosts []string, notBefore, notAfter time.Time) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: "hub"},
		NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der, c.cert.Raw}, PrivateKey: key}
}

func (c *ca) pin() string { return capin.Fingerprint(c.cert.Raw) }

func (c *ca) file(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.cert.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// fakeHub answers ReportStatus and WatchConfig and records the Authorization header it saw.
type fakeHub struct {
	fleetv1connect.UnimplementedAgentServiceHandler
	auth atomic.Value
}

func (h *fakeHub) ReportStatus(_ context.Context, req *connect.Request[fleetv1.ReportStatusRequest]) (*connect.Response[fleetv1.ReportStatusResponse], error) {
	h.auth.Store(req.Header().Get("Authorization"))
	return connect.NewResponse(&fleetv1.ReportStatusResponse{}), nil
}

func (h *fakeHub) WatchConfig(_ context.Context, req *connect.Request[fleetv1.WatchConfigRequest], s *connect.ServerStream[fleetv1.WatchConfigResponse]) error {
	h.auth.Store(req.Header().Get("Authorization"))
	return s.Send(&fleetv1.WatchConfigResponse{})
}

// serve starts a real HTTP/2 TLS server on 127.0.0.1 presenting cert and returns its port.
func serve(t *testing.T, cert tls.Certificate) (string, *fakeHub) {
	t.Helper()
	port, hub, _ := serveServer(t, cert)
	return port, hub
}

// serveServer is serve, returning the server too.
func serveServer(t *testing.T, cert tls.Certificate) (string, *fakeHub, *httptest.Server) {
	t.Helper()
	hub := &fakeHub{}
	mux := http.NewServeMux()
	mux.Handle(fleetv1connect.NewAgentServiceHandler(hub))
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are the point
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return port, hub, srv
}

func report(t *testing.T, o Options) error {
	t.Helper()
	c, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = c.Agent().ReportStatus(ctx, connect.NewRequest(&fleetv1.ReportStatusRequest{}))
	return err
}

func wantRefused(t *testing.T, err error, fragment string) {
	t.Helper()
	if err == nil {
		t.Fatalf("the hub was trusted; want a refusal containing %q", fragment)
	}
	if !strings.Contains(err.Error(), fragment) {
		t.Fatalf("refused with %v; want %q", err, fragment)
	}
}

func TestPinnedCA(t *testing.T) {
	hubCA, otherCA := newCA(t, "Kollect hub CA"), newCA(t, "someone else")
	now := time.Now()
	token := func() string { return "agent-credential" }

	t.Run("right fingerprint, right host", func(t *testing.T) {
		port, hub := serve(t, hubCA.leaf(t, []string{"127.0.0.1", "localhost"}, now.Add(-time.Hour), now.Add(time.Hour)))
		// The pin as a user may paste it: upper case, with spaces.
		pin := "  " + strings.ToUpper(hubCA.pin()) + " "
		for _, host := range []string{"127.0.0.1", "localhost"} {
			if err := report(t, Options{URL: "https://" + host + ":" + port + "/", CAFingerprint: pin, Token: token}); err != nil {
				t.Fatalf("%s: %v", host, err)
			}
			if got := hub.auth.Load(); got != "Bearer agent-credential" {
				t.Fatalf("Authorization %q", got)
			}
		}
	})
	t.Run("wrong fingerprint", func(t *testing.T) {
		port, _ := serve(t, hubCA.leaf(t, []string{"127.0.0.1"}, now.Add(-time.Hour), now.Add(time.Hour)))
		wantRefused(t, report(t, Options{URL: "https://127.0.0.1:" + port, CAFingerprint: otherCA.pin(), Token: token}),
			"does not contain the pinned CA")
	})
	t.Run("right fingerprint, wrong host name", func(t *testing.T) {
		// Signed by the pinned CA, but for another host: a certificate the CA issued to some
		// other server must not let that server pose as the hub.
		port, _ := serve(t, hubCA.leaf(t, []string{"hub.example.internal", "10.0.0.7"}, now.Add(-time.Hour), now.Add(time.Hour)))
		wantRefused(t, report(t, Options{URL: "https://127.0.0.1:" + port, CAFingerprint: hubCA.pin(), Token: token}),
			"not 127.0.0.1")
		wantRefused(t, report(t, Options{URL: "https://localhost:" + port, CAFingerprint: hubCA.pin(), Token: token}),
			"not localhost")
	})
	t.Run("expired certificate", func(t *testing.T) {
		port, _ := serve(t, hubCA.leaf(t, []string{"127.0.0.1"}, now.Add(-48*time.Hour), now.Add(-time.Hour)))
		wantRefused(t, report(t, Options{URL: "https://127.0.0.1:" + port, CAFingerprint: hubCA.pin(), Token: token}),
			"expired")
	})
	t.Run("certificate not yet valid", func(t *testing.T) {
		port, _ := serve(t, hubCA.leaf(t, []string{"127.0.0.1"}, now.Add(time.Hour), now.Add(48*time.Hour)))
		wantRefused(t, report(t, Options{URL: "https://127.0.0.1:" + port, CAFingerprint: hubCA.pin(), Token: token}),
			"not yet valid")
	})
	t.Run("malformed fingerprint", func(t *testing.T) {
		if _, err := New(Options{URL: "https://127.0.0.1:1", CAFingerprint: "sha256:abc"}); err == nil || !strings.Contains(err.Error(), "64 hex digits") {
			t.Fatalf("New with a short pin: %v", err)
		}
	})
}

func TestCAFile(t *testing.T) {
	hubCA, otherCA := newCA(t, "Kollect hub CA"), newCA(t, "someone else")
	now := time.Now()
	port, _ := serve(t, hubCA.leaf(t, []string{"127.0.0.1"}, now.Add(-time.Hour), now.Add(time.Hour)))
	if err := report(t, Options{URL: "https://127.0.0.1:" + port, CAFile: hubCA.file(t)}); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, report(t, Options{URL: "https://127.0.0.1:" + port, CAFile: otherCA.file(t)}), "unknown authority")
	wantRefused(t, report(t, Options{URL: "https://localhost:" + port, CAFile: hubCA.file(t)}), "wanted to match localhost")
	// Without a pin or a file the system roots do not know a test CA.
	wantRefused(t, report(t, Options{URL: "https://127.0.0.1:" + port}), "unknown authority")
}

// The token goes on streams too, and an empty token sends no header (an agent before it has
// registered).
func TestBearerToken(t *testing.T) {
	hubCA := newCA(t, "Kollect hub CA")
	now := time.Now()
	port, hub := serve(t, hubCA.leaf(t, []string{"127.0.0.1"}, now.Add(-time.Hour), now.Add(time.Hour)))
	var tok atomic.Value
	tok.Store("")
	c, err := New(Options{URL: "https://127.0.0.1:" + port, CAFingerprint: hubCA.pin(), Token: func() string { return tok.Load().(string) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Agent().ReportStatus(ctx, connect.NewRequest(&fleetv1.ReportStatusRequest{})); err != nil || hub.auth.Load() != "" {
		t.Fatalf("without a token: %v, Authorization %q", err, hub.auth.Load())
	}
	tok.Store("s3cret")
	stream, err := c.Agent().WatchConfig(ctx, connect.NewRequest(&fleetv1.WatchConfigRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		t.Fatalf("stream: %v", stream.Err())
	}
	if got := hub.auth.Load(); got != "Bearer s3cret" {
		t.Fatalf("stream Authorization %q", got)
	}
}

func TestURLChecked(t *testing.T) {
	for _, u := range []string{"http://127.0.0.1:1", "127.0.0.1:1", "https://"} {
		if _, err := New(Options{URL: u}); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
}
