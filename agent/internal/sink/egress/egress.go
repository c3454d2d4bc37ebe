package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// Rules a refusal names.
const (
	RuleLinkLocal     = "link-local addresses are never sink destinations"
	RuleCloudMetadata = "cloud instance metadata endpoints are never sink destinations"
	RuleLoopback      = "loopback addresses are refused unless the agent runs with --allow-local-sinks"
	RuleUnspecified   = "unspecified addresses are refused unless the agent runs with --allow-local-sinks"
	RuleFileURL       = "file:// URLs are refused unless the agent runs with --allow-local-sinks"
	RuleMulticast     = "multicast addresses are never sink destinations"
)

// metadataHosts are names cloud providers serve instance metadata under.
var metadataHosts = []string{"metadata.google.internal", "metadata.goog", "metadata.azure.com", "instance-data.ec2.internal"}

// metadataAddrs are metadata endpoints outside the link-local ranges.
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("fd00:ec2::254"),   // AWS, IPv6
	netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
}

// Policy says which destinations beyond the always-refused ones are allowed.
type Policy struct {
	// AllowLocal allows loopback and unspecified addresses and file:// URLs.
	AllowLocal bool
}

// Guard enforces a Policy. The zero Guard refuses local destinations.
type Guard struct {
	policy Policy
	// allow are the scopes' allowlists of one sink (see Restrict); every one must allow a
	// destination.
	allow []Allowlist
}

// New returns a guard for p.
func New(p Policy) *Guard { return &Guard{policy: p} }

// RefusedError is a destination the guard refused.
type RefusedError struct {
	// Destination is what was refused: host:port, an address or a URL without credentials.
	Destination string
	Rule        string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("egress refused for %s: %s", e.Destination, e.Rule)
}

// IsRefused reports whether err is, or wraps, a refusal.
func IsRefused(err error) bool {
	var r *RefusedError
	return errors.As(err, &r)
}

// CheckAddr returns the rule that refuses ip, or "".
func (g *Guard) CheckAddr(ip netip.Addr) string {
	ip = ip.Unmap()
	for _, m := range metadataAddrs {
		if ip == m {
			return RuleCloudMetadata
		}
	}
	switch {
	case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		return RuleLinkLocal
	case ip.IsMulticast():
		return RuleMulticast
	case ip.IsLoopback() && !g.allowLocal():
		return RuleLoopback
	case ip.IsUnspecified() && !g.allowLocal():
		return RuleUnspecified
	}
	return ""
}

func (g *Guard) allowLocal() bool { return g != nil && g.policy.AllowLocal }

// CheckHost refuses, before any resolution, a host that names a metadata endpoint or is a
// refused literal address. Names that resolve to refused addresses are caught at dial time.
func (g *Guard) CheckHost(host string) error {
	_, err := g.checkHost(host)
	return err
}

// checkHost is CheckHost that also returns the allowlists host's addresses must satisfy.
func (g *Guard) checkHost(host string) ([]Allowlist, error) {
	h := normalHost(host)
	for _, m := range metadataHosts {
		if h == m {
			return nil, &RefusedError{Destination: host, Rule: RuleCloudMetadata}
		}
	}
	if ip, err := netip.ParseAddr(h); err == nil {
		if rule := g.CheckAddr(ip); rule != "" {
			return nil, &RefusedError{Destination: host, Rule: rule}
		}
	}
	return g.checkAllowlists(host)
}

// CheckFile refuses a local path (a file:// URL's, or a client's own idea of a local
// repository) unless local destinations are allowed.
func (g *Guard) CheckFile(path string) error {
	if !g.allowLocal() {
		return &RefusedError{Destination: "file://" + path, Rule: RuleFileURL}
	}
	return nil
}

// CheckURL refuses a URL whose scheme is file (unless local destinations are allowed) or
// whose host CheckHost refuses. The error never shows the URL's user information.
func (g *Guard) CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return nil // not a URL: the sink's own validation says what is wrong
	}
	if strings.EqualFold(u.Scheme, "file") || (u.Scheme == "" && strings.HasPrefix(raw, "/")) {
		return g.CheckFile(u.Path)
	}
	if u.Hostname() == "" {
		return nil
	}
	return g.CheckHost(u.Hostname())
}

// control runs after resolution, right before each connect: the last word on the address.
func (g *Guard) control(ctx context.Context, _, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &RefusedError{Destination: address, Rule: "the address to connect to cannot be checked"}
	}
	if rule := g.CheckAddr(ap.Addr()); rule != "" {
		return &RefusedError{Destination: address, Rule: rule}
	}
	return g.checkResolved(ctx, address, ap.Addr())
}

// Dialer returns a net.Dialer that refuses, after resolution, what the policy refuses. Dial
// through DialContext instead where the client lets you: it also checks the host name.
func (g *Guard) Dialer() *net.Dialer {
	return &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, ControlContext: g.control}
}

// DialContext dials through Dialer, refusing metadata host names and names no allowlist
// matches before resolving them, and the resolved addresses the allowlists refuse.
func (g *Guard) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(address)
	if err == nil {
		pending, err := g.checkHost(host)
		if err != nil {
			return nil, err
		}
		ctx = context.WithValue(ctx, pendingKey{}, pendingDial{host: host, lists: pending})
	}
	return g.Dialer().DialContext(ctx, network, address)
}

// Dial is DialContext without a context, for clients that take a Dial method (NATS).
func (g *Guard) Dial(network, address string) (net.Conn, error) {
	return g.DialContext(context.Background(), network, address)
}

// Transport returns an HTTP transport that dials through the guard; proxies from the
// environment are kept (the guard checks the proxy's address, which the agent's operator
// chose, when it dials it, and the destination before the request is handed to the proxy:
// see proxyFor).
func (g *Guard) Transport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = g.DialContext
	t.Proxy = g.proxyFor
	return t
}

// proxyFromEnvironment is the proxy of a request as HTTPS_PROXY, HTTP_PROXY and NO_PROXY say
// (a variable for tests: net/http reads the environment once per process).
var proxyFromEnvironment = http.ProxyFromEnvironment

// proxyFor returns the environment's proxy for r, or none, once the guard allowed r's
// destination. Without a proxy the dial checks the resolved address; through one the agent
// never dials the destination, so it is checked here as a dial would check it: the name, then
// every address it resolves to now. (The proxy resolves the name again; a name whose answers
// change between the two lookups is the one case this cannot see.)
func (g *Guard) proxyFor(r *http.Request) (*url.URL, error) {
	host := r.URL.Hostname()
	if err := g.CheckHost(host); err != nil {
		return nil, err
	}
	proxy, err := proxyFromEnvironment(r)
	if err != nil || proxy == nil {
		return proxy, err
	}
	if err := g.checkResolvedNow(r.Context(), host); err != nil {
		return nil, err
	}
	return proxy, nil
}

// checkResolvedNow resolves host and checks each of its addresses as a dial would.
func (g *Guard) checkResolvedNow(ctx context.Context, host string) error {
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return g.CheckResolved(host, ip)
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return fmt.Errorf("resolving %s to check it before the request goes through a proxy: %w", host, err)
	}
	for _, ip := range addrs {
		if err := g.CheckResolved(host, ip.Unmap()); err != nil {
			return err
		}
	}
	return nil
}

// TLSDialer returns a dial function for clients that take one whole (franz-go): it dials
// through the guard and, when cfg is not nil, runs TLS over the connection with the host as
// server name unless cfg names one.
func (g *Guard) TLSDialer(cfg *tls.Config) func(ctx context.Context, network, address string) (net.Conn, error) {
	if cfg == nil {
		return g.DialContext
	}
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		c := cfg.Clone()
		if c.ServerName == "" {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return nil, fmt.Errorf("splitting %s: %w", address, err)
			}
			c.ServerName = host
		}
		raw, err := g.DialContext(ctx, network, address)
		if err != nil {
			return nil, err
		}
		conn := tls.Client(raw, c)
		if err := conn.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, err
		}
		return conn, nil
	}
}

// CheckHostPort is CheckHost for "host:port" or a bare host.
func (g *Guard) CheckHostPort(address string) error {
	if host, _, err := net.SplitHostPort(address); err == nil {
		address = host
	}
	return g.CheckHost(address)
}

// Fingerprint identifies what g allows, so that a connection pool dialled through one guard is
// reused only by a sink the same policy and allowlists govern.
func (g *Guard) Fingerprint() string {
	if g == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%+v %+v", g.policy, g.allow)
}
