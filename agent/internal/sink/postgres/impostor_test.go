package postgres

import (
	"context"
	"crypto/tls"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"kollect.dev/agent/internal/sink"
	"kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// impostor is a PostgreSQL look-alike that serves TLS with a certificate for 127.0.0.1 from a
// CA of its own and asks every client for its password in clear text, as a server that took
// over a sink's address would. It keeps every password it receives.
type impostor struct {
	port  int
	caPEM []byte // its CA, for the case of a sink that trusts it

	mu        sync.Mutex
	passwords []string
}

func startImpostor(t *testing.T) *impostor {
	t.Helper()
	caPEM, certFile, keyFile, err := testenv.ServerCertificate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	im := &impostor{port: ln.Addr().(*net.TCPAddr).Port, caPEM: caPEM}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go im.serve(conn, cfg)
		}
	}()
	return im
}

// serve answers one client: TLS when it asks (its handshake fails where the client refuses the
// certificate), then a clear-text password request.
func (im *impostor) serve(conn net.Conn, cfg *tls.Config) {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	be := pgproto3.NewBackend(conn, conn)
	msg, err := be.ReceiveStartupMessage()
	if err != nil {
		return
	}
	if _, ok := msg.(*pgproto3.SSLRequest); ok {
		if _, err := conn.Write([]byte("S")); err != nil {
			return
		}
		tc := tls.Server(conn, cfg)
		if err := tc.Handshake(); err != nil {
			return
		}
		be = pgproto3.NewBackend(tc, tc)
		if msg, err = be.ReceiveStartupMessage(); err != nil {
			return
		}
	}
	if _, ok := msg.(*pgproto3.StartupMessage); !ok {
		return
	}
	be.Send(&pgproto3.AuthenticationCleartextPassword{})
	if be.Flush() != nil || be.SetAuthType(pgproto3.AuthTypeCleartextPassword) != nil {
		return
	}
	if reply, err := be.Receive(); err == nil {
		if p, ok := reply.(*pgproto3.PasswordMessage); ok {
			im.mu.Lock()
			im.passwords = append(im.passwords, p.Password)
			im.mu.Unlock()
		}
	}
	be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", Code: "28P01", Message: "password authentication failed"})
	_ = be.Flush()
}

func (im *impostor) received(password string) bool {
	im.mu.Lock()
	defer im.mu.Unlock()
	return slices.Contains(im.passwords, password)
}

// TestImpostorNeverGetsThePassword: a server at the sink's address whose certificate no
// trusted authority signed gets no password, by default (verify-full against the system
// roots), nor with a CA of the sink's own in any verifying mode (require with a CA verifies
// the chain). Only the modes that need a KollectClusterScope's grant (require without a CA)
// and a sink that trusts the impostor's CA hand it over: the impostor works.
func TestImpostorNeverGetsThePassword(t *testing.T) {
	im := startImpostor(t)
	trustedCA, _, _, err := testenv.ServerCertificate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		mode   v1alpha1.PostgresSSLMode
		ca     []byte
		leaked bool
	}{
		{name: "default", mode: ""},
		{name: "verify-full with the sink's CA", mode: "verify-full", ca: trustedCA},
		{name: "require with the sink's CA", mode: "require", ca: trustedCA},
		{name: "verify-ca with the sink's CA", mode: "verify-ca", ca: trustedCA},
		{name: "require without a CA verifies nothing", mode: "require", leaked: true},
		{name: "a sink that trusts the impostor's CA", mode: "require", ca: im.caPEM, leaked: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			password := "secret of " + tc.name
			sp := &v1alpha1.PostgresSinkConfig{Host: "127.0.0.1", Port: int32(im.port), Database: "postgres",
				SSLMode: tc.mode, SecretRef: v1alpha1.SecretReference{Name: "pg"}, MaxConnections: 1}
			if tc.ca != nil {
				sp.TLS = &v1alpha1.TLSConfig{CASecretRef: &v1alpha1.SecretKeySelector{Name: "pg-ca", Key: "ca.crt"}}
			}
			secrets := func(_ context.Context, name string) (map[string][]byte, error) {
				if name == "pg-ca" {
					return map[string][]byte{"ca.crt": tc.ca}, nil
				}
				return map[string][]byte{"username": []byte("kollect"), "password": []byte(password)}, nil
			}
			s, err := open(ctx, sp, sink.Env{Cluster: "east", Namespace: "ns", Name: "db", Secrets: secrets})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			err = s.Probe(pctx)
			if err == nil || sink.ClassOf(err) != sink.Terminal {
				t.Fatalf("probe of the impostor: %v (class %s), want a terminal error", err, sink.ClassOf(err))
			}
			if got := im.received(password); got != tc.leaked {
				t.Fatalf("the impostor received the password: %t, want %t (probe: %v)", got, tc.leaked, err)
			}
			if !tc.leaked && !strings.Contains(err.Error(), "certificate") {
				t.Fatalf("the refusal does not name the certificate: %v", err)
			}
		})
	}
}
