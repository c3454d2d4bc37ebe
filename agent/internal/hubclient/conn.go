package hubclient

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"

	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"
)

// tlsConfig verifies the hub: against a pinned CA fingerprint (the hub's own CA), a CA file,
// or the system roots.
func tlsConfig(o Options) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}
	switch {
	case o.CAFingerprint != "":
		pin := o.CAFingerprint
		// The chain is verified by hand: it must be signed by a CA whose fingerprint is pinned.
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			certs := cs.PeerCertificates
			if len(certs) == 0 {
				return errors.New("hub presented no certificate")
			}
			roots := x509.NewCertPool()
			var pinned bool
			for _, c := range certs {
				if fingerprint(c.Raw) == pin {
					roots.AddCert(c)
					pinned = true
				}
			}
			if !pinned {
				return fmt.Errorf("hub certificate chain does not contain the pinned CA %s", pin)
			}
			inter := x509.NewCertPool()
			for _, c := range certs[1:] {
				inter.AddCert(c)
			}
			_, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
			return err
		}
	case o.CAFile != "":
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading hub CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no PEM certificate", o.CAFile)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

func fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// newHTTPClient speaks HTTP/2 over TLS, which server streams need.
func newHTTPClient(cfg *tls.Config) *http.Client {
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Client{Transport: &http2.Transport{
		TLSClientConfig: cfg,
		ReadIdleTimeout: 30 * time.Second, // detect a dead hub on long streams
		PingTimeout:     10 * time.Second,
		DialTLSContext: func(ctx context.Context, network, addr string, c *tls.Config) (net.Conn, error) {
			return (&tls.Dialer{NetDialer: dialer, Config: c}).DialContext(ctx, network, addr)
		},
	}}
}

// bearer adds the agent credential to every call.
func bearer(credential func() string) connect.Interceptor {
	return &bearerInterceptor{credential: credential}
}

type bearerInterceptor struct{ credential func() string }

func (b *bearerInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if c := b.credential(); c != "" {
			req.Header().Set("Authorization", "Bearer "+c)
		}
		return next(ctx, req)
	}
}

func (b *bearerInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		if c := b.credential(); c != "" {
			conn.RequestHeader().Set("Authorization", "Bearer "+c)
		}
		return conn
	}
}

func (b *bearerInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

func newAgentClient(o Options, credential func() string) (fleetv1connect.AgentServiceClient, error) {
	cfg, err := tlsConfig(o)
	if err != nil {
		return nil, err
	}
	return fleetv1connect.NewAgentServiceClient(newHTTPClient(cfg), o.URL, connect.WithInterceptors(bearer(credential))), nil
}
