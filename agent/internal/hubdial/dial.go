package hubdial

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"

	"kollect.dev/proto/capin"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"
)

// Options say how to reach and trust the hub.
type Options struct {
	// URL of the hub, https://host:port.
	URL string
	// CAFingerprint pins the hub's CA ("sha256:<hex>" as the hub prints it); CAFile trusts a
	// PEM bundle instead. With neither, the system roots verify the hub. The host name of URL
	// is checked in every case.
	CAFingerprint string
	CAFile        string
	// Token returns the bearer token for each call; "" sends none (an agent before it has
	// registered). Nil sends none.
	Token func() string
	// UnaryTimeout bounds unary calls whose context has no deadline; 0 leaves them unbounded.
	// Streams are never bounded by it.
	UnaryTimeout time.Duration
}

// Conn is a configured connection to the hub, shared by the clients it makes.
type Conn struct {
	http *http.Client
	url  string
	opts []connect.ClientOption
}

// New checks the options and builds the transport. It does not dial: the first call does.
func New(o Options) (*Conn, error) {
	u, err := url.Parse(strings.TrimSuffix(o.URL, "/"))
	if err != nil {
		return nil, fmt.Errorf("hub URL %q: %w", o.URL, err)
	}
	if u.Scheme != "https" || u.Hostname() == "" {
		return nil, fmt.Errorf("hub URL %q: want https://host:port", o.URL)
	}
	cfg, err := TLSConfig(o.CAFingerprint, o.CAFile, u.Hostname())
	if err != nil {
		return nil, err
	}
	return &Conn{
		http: newHTTPClient(cfg),
		url:  u.String(),
		opts: []connect.ClientOption{connect.WithInterceptors(&auth{token: o.Token, unaryTimeout: o.UnaryTimeout})},
	}, nil
}

// Agent returns a client of the service agents call.
func (c *Conn) Agent() fleetv1connect.AgentServiceClient {
	return fleetv1connect.NewAgentServiceClient(c.http, c.url, c.opts...)
}

// Fleet returns a client of the service the dashboard and the CLI call.
func (c *Conn) Fleet() fleetv1connect.FleetServiceClient {
	return fleetv1connect.NewFleetServiceClient(c.http, c.url, c.opts...)
}

// TLSConfig verifies the hub as serverName: against the pinned CA when caFingerprint is set
// (it wins over caFile, as it always has), else against the PEM bundle in caFile, else
// against the system roots.
func TLSConfig(caFingerprint, caFile, serverName string) (*tls.Config, error) {
	switch {
	case caFingerprint != "":
		cfg, err := capin.ClientConfig(caFingerprint, serverName)
		if err != nil {
			return nil, fmt.Errorf("hub CA: %w", err)
		}
		return cfg, nil
	case caFile != "":
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("reading hub CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no PEM certificate", caFile)
		}
		return &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName, RootCAs: pool}, nil
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}, nil
}

// newHTTPClient speaks HTTP/2 over TLS, which server streams need. There is no client-wide
// timeout: it would cut WatchConfig and WatchFleet streams; pings detect a dead hub instead.
func newHTTPClient(cfg *tls.Config) *http.Client {
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Client{Transport: &http2.Transport{
		TLSClientConfig: cfg,
		ReadIdleTimeout: 30 * time.Second,
		PingTimeout:     10 * time.Second,
		DialTLSContext: func(ctx context.Context, network, addr string, c *tls.Config) (net.Conn, error) {
			return (&tls.Dialer{NetDialer: dialer, Config: c}).DialContext(ctx, network, addr)
		},
	}}
}
