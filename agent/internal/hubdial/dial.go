package hubdial

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"

	"kollect.dev/proto/capin"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"
)

// Options say how to reach and trust the hub.
type Options struct {
	// URL of the hub, https://host:port, or several, comma-separated: the replicas of one hub
	// (see URLs).
	URL string
	// URLs are the replicas of one hub, tried in order (see dialer); they replace URL when set.
	// All share one path and one trust (CAFingerprint or CAFile); each URL's host name is
	// checked against the certificate of the replica that answers there.
	URLs []string
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
	http   *http.Client
	url    string
	opts   []connect.ClientOption
	dialer *dialer
}

// New checks the options and builds the transport. It does not dial: the first call does.
func New(o Options) (*Conn, error) {
	raw := o.URLs
	if len(raw) == 0 {
		raw = SplitURLs(o.URL)
	}
	if len(raw) == 0 {
		return nil, errors.New("no hub URL")
	}
	d := &dialer{net: &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}}
	var path string
	for i, r := range raw {
		u, err := url.Parse(strings.TrimSuffix(r, "/"))
		if err != nil {
			return nil, fmt.Errorf("hub URL %q: %w", r, err)
		}
		if u.Scheme != "https" || u.Hostname() == "" {
			return nil, fmt.Errorf("hub URL %q: want https://host:port", r)
		}
		if i == 0 {
			path = u.Path
		} else if u.Path != path {
			return nil, fmt.Errorf("hub URL %q: every replica's URL must have the path of the first (%q)", r, path)
		}
		cfg, err := TLSConfig(o.CAFingerprint, o.CAFile, u.Hostname())
		if err != nil {
			return nil, err
		}
		cfg.NextProtos = []string{"h2"}
		addr := u.Host
		if u.Port() == "" {
			addr = net.JoinHostPort(u.Hostname(), "443")
		}
		d.eps = append(d.eps, endpoint{host: u.Host, addr: addr, tls: cfg})
	}
	// Each client starts with a replica of its own choosing, so that a fleet spreads over the
	// replicas instead of crowding the first one listed.
	d.cur.Store(int32(rand.IntN(len(d.eps))))
	first, _ := url.Parse(strings.TrimSuffix(raw[0], "/"))
	return &Conn{
		http:   newHTTPClient(d),
		url:    first.String(),
		opts:   []connect.ClientOption{connect.WithInterceptors(&auth{token: o.Token, unaryTimeout: o.UnaryTimeout})},
		dialer: d,
	}, nil
}

// SplitURLs splits a comma-separated list of hub URLs, dropping blanks and repeats.
func SplitURLs(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// Current is the host:port of the replica the connection goes to (or will be dialed first).
func (c *Conn) Current() string { return c.dialer.current().host }

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
// Every call shares one connection, to whichever replica d reached (see dialer).
func newHTTPClient(d *dialer) *http.Client {
	return &http.Client{Transport: &hostHeader{d: d, next: &http2.Transport{
		ReadIdleTimeout: 30 * time.Second,
		PingTimeout:     10 * time.Second,
		DialTLSContext: func(ctx context.Context, _, _ string, _ *tls.Config) (net.Conn, error) {
			return d.dial(ctx)
		},
	}}}
}
