package egress

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"testing"
)

// errDialRecorded stops a dial once the address it would connect to is known.
var errDialRecorded = errors.New("dial recorded, not made")

// dialledBy returns the "host:port" net/http would connect to for raw, or "" when net/http
// would not dial at all (not an http(s) URL, no host). The transport's own dial function
// records the address and fails: nothing is connected.
func dialledBy(rt *http.Transport, got *string, raw string) string {
	req, err := http.NewRequest(http.MethodGet, raw, nil)
	if err != nil || (req.URL.Scheme != "http" && req.URL.Scheme != "https") {
		return ""
	}
	*got = ""
	if resp, err := rt.RoundTrip(req); err == nil {
		resp.Body.Close()
	}
	return *got
}

// connectedTo returns the address a net.Dialer would connect to for address, or "" when it
// would not connect (or would have to ask DNS first: fuzzing does not resolve names). The
// dialer's control function records the address after its own parsing and aborts.
func connectedTo(address string) string {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return ""
	}
	if _, err := netip.ParseAddr(host); err != nil {
		return ""
	}
	var got string
	d := net.Dialer{ControlContext: func(_ context.Context, _, a string, _ syscall.RawConn) error {
		got = a
		return errDialRecorded
	}}
	if c, err := d.DialContext(context.Background(), "tcp", address); err == nil {
		c.Close()
	}
	return got
}

// refusedByAddress says whether g refuses host by what it is before any resolution: a
// metadata name or a literal address (the only hosts a dial reaches without asking DNS).
func refusedByAddress(g *Guard, host string) bool {
	h := normalHost(host)
	for _, m := range metadataHosts {
		if h == m {
			return true
		}
	}
	ip, err := netip.ParseAddr(h)
	return err == nil && g.CheckAddr(ip) != ""
}

// FuzzGuardJudgesDialledHost: the checks sinks make before connecting (CheckURL for git,
// GitLab, S3, GCS, Azure and NATS endpoints; CheckHostPort for Kafka brokers and MongoDB
// hosts; CheckHost for PostgreSQL) judge the host the client then dials. For any destination:
// when net/http would dial a refused address or metadata name for it as a URL, CheckURL
// refuses the URL; when a net.Dialer would connect to a refused address for it as host:port,
// CheckHostPort refuses it, and so does a scope's allowlist the address lies outside; and a
// refused host stays refused whatever its spelling (case, a trailing dot, brackets, an
// IPv4-mapped IPv6 form, a port).
func FuzzGuardJudgesDialledHost(f *testing.F) {
	for _, s := range []string{
		"https://git.example.com/team/r.git", "http://169.254.169.254/latest/meta-data/",
		"HTTP://169.254.169.254/", "http://[::ffff:169.254.169.254]/", "http://[::ffff:a9fe:a9fe]:80/",
		"http://[fe80::1%25eth0]:8080/", "http://user:pw@169.254.169.254@ok.example/",
		"http://ok.example@169.254.169.254/", "http://169.254.169.254%2eok.example/",
		"http://169.254.169.254./", "http://metadata.google.internal./computeMetadata/v1/",
		"http://METADATA.GOOGLE.INTERNAL/", "https://metadata.azure.com:443/", "http://2130706433/",
		"http://0177.0.0.1/", "http://0x7f.0.0.1/", "http://127.1/", "http://[::1]:9000/",
		"http://[fd00:ec2::254]/", "http://100.100.100.200/", "http://[0:0:0:0:0:ffff:127.0.0.1]/",
		"http://\uff11\uff16\uff19\uff0e\uff12\uff15\uff14\uff0e\uff11\uff16\uff19\uff0e\uff12\uff15\uff14/",
		"http://\u24dc\u24d4\u24e3\u24d0\u24d3\u24d0\u24e3\u24d0.google.internal/",
		"nats://169.254.169.254:4222", "169.254.169.254:9092", "[::ffff:127.0.0.1]:27017",
		"[fe80::1%eth0]:5432", "10.0.0.5:9092", "kafka-0.allowed.example:9092", "224.0.0.1:80",
		"0.0.0.0:80", "[::]:80", "s3.amazonaws.com:443", "https://10.1.2.3/bucket",
	} {
		f.Add(s)
	}
	strict := New(Policy{})
	allowed := netip.MustParsePrefix("10.0.0.0/8")
	scoped := strict.Restrict(Allowlist{Source: "fuzz", Hosts: []string{"*.allowed.example"}, Prefixes: []netip.Prefix{allowed}})
	var dialled string
	rt := &http.Transport{DialContext: func(_ context.Context, _, address string) (net.Conn, error) {
		dialled = address
		return nil, errDialRecorded
	}}
	f.Fuzz(func(t *testing.T, dest string) {
		if addr := dialledBy(rt, &dialled, dest); addr != "" {
			// An address that does not split ("]0:80" for "http://]0") no dialer connects to.
			host, _, err := net.SplitHostPort(addr)
			if err == nil && refusedByAddress(strict, host) && strict.CheckURL(dest) == nil {
				t.Fatalf("CheckURL(%q) = nil, and net/http dials %s", dest, addr)
			}
		}
		if addr := connectedTo(dest); addr != "" {
			ap, err := netip.ParseAddrPort(addr)
			if err != nil {
				t.Fatalf("the dialer connected %q to %q", dest, addr)
			}
			if strict.CheckAddr(ap.Addr()) != "" && strict.CheckHostPort(dest) == nil {
				t.Fatalf("CheckHostPort(%q) = nil, and the dialer connects to %s", dest, addr)
			}
			if !allowed.Contains(ap.Addr().Unmap()) && scoped.CheckHostPort(dest) == nil {
				t.Fatalf("CheckHostPort(%q) = nil under an allowlist of 10.0.0.0/8, and the dialer connects to %s", dest, addr)
			}
		}
		host := dest
		if h, _, err := net.SplitHostPort(dest); err == nil {
			host = h
		}
		// Respellings of a bare host: one with a stray bracket ("[169.254.0.0") joined
		// with a port is no address any dialer splits.
		if strings.ContainsAny(host, "[]") || strict.CheckHost(host) == nil {
			return
		}
		variants := []string{strings.ToUpper(host), "[" + host + "]", net.JoinHostPort(host, "443")}
		if !strings.HasSuffix(host, ".") {
			variants = append(variants, host+".")
		}
		if ip, err := netip.ParseAddr(normalHost(host)); err == nil && ip.Is4() {
			variants = append(variants, "::ffff:"+ip.String(), net.JoinHostPort("::ffff:"+ip.String(), "80"))
		}
		for _, v := range variants {
			if strict.CheckHostPort(v) == nil {
				t.Fatalf("%q is refused, and its spelling %q is not", host, v)
			}
		}
	})
}
