package egress

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// Allowlist is one scope's restriction of where sinks may connect: a destination is allowed
// when the host it is named by matches one of Hosts, or when every address it is reached at
// lies in one of Prefixes. A guard with several allowlists needs every one of them to allow a
// destination, so a namespace's KollectScope can only narrow its cluster scope's list.
type Allowlist struct {
	// Source names who set the list, for refusals: "KollectClusterScope platform".
	Source string
	// Hosts are host names or globs ("*.db.example.com"), matched case-insensitively.
	Hosts []string
	// Prefixes are the address ranges allowed whatever name reached them.
	Prefixes []netip.Prefix
}

// Rule is what a refusal by the list says.
func (a Allowlist) Rule() string {
	var allowed []string
	if len(a.Hosts) > 0 {
		allowed = append(allowed, "hosts "+strings.Join(a.Hosts, ", "))
	}
	if len(a.Prefixes) > 0 {
		ps := make([]string, len(a.Prefixes))
		for i, p := range a.Prefixes {
			ps[i] = p.String()
		}
		allowed = append(allowed, "addresses in "+strings.Join(ps, ", "))
	}
	if len(allowed) == 0 {
		allowed = append(allowed, "no destination")
	}
	return fmt.Sprintf("%s allows sinks to reach only %s", a.Source, strings.Join(allowed, " or "))
}

func (a Allowlist) allowsHost(host string) bool {
	h := normalHost(host)
	for _, p := range a.Hosts {
		if ok, _ := path.Match(strings.ToLower(p), h); ok {
			return true
		}
	}
	return false
}

func (a Allowlist) allowsAddr(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, p := range a.Prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// normalHost is host as it is dialled: without brackets or a trailing dot, in lower case, and
// an internationalised name in the ASCII net/http maps it to before dialling (IDNA's lookup
// mapping: fullwidth digits and dots, circled letters), so that a host is refused or allowed
// in the spelling that is connected to, not one that only looks different.
func normalHost(host string) string {
	h := strings.Trim(host, "[]")
	if !isASCII(h) {
		if a, err := idna.Lookup.ToASCII(h); err == nil {
			h = a
		}
	}
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// Restrict returns a guard with g's policy and allowlists plus lists: the guard of one sink,
// under the scopes of its namespace.
func (g *Guard) Restrict(lists ...Allowlist) *Guard {
	if len(lists) == 0 {
		return g
	}
	out := &Guard{}
	if g != nil {
		out.policy = g.policy
		out.allow = append(out.allow, g.allow...)
	}
	out.allow = append(out.allow, lists...)
	return out
}

// checkAllowlists refuses host when an allowlist refuses it before resolution: a literal
// address outside a list, or a name a list matches neither by host nor possibly by address.
// It returns the lists a name must still satisfy with its resolved addresses.
func (g *Guard) checkAllowlists(host string) (pending []Allowlist, err error) {
	if g == nil {
		return nil, nil
	}
	ip, perr := netip.ParseAddr(normalHost(host))
	isAddr := perr == nil
	for _, a := range g.allow {
		switch {
		case a.allowsHost(host):
		case isAddr && a.allowsAddr(ip):
		case !isAddr && len(a.Prefixes) > 0:
			pending = append(pending, a)
		default:
			return nil, &RefusedError{Destination: host, Rule: a.Rule()}
		}
	}
	return pending, nil
}

// pendingKey carries, from DialContext to the dialer's control function, the host being
// dialed and the allowlists its addresses must satisfy.
type pendingKey struct{}

type pendingDial struct {
	host  string
	lists []Allowlist
}

// checkResolved refuses a resolved address the pending allowlists of ctx refuse. A dial that
// did not come through DialContext (no pending entry) must satisfy every list by address.
func (g *Guard) checkResolved(ctx context.Context, address string, ip netip.Addr) error {
	if g == nil || len(g.allow) == 0 {
		return nil
	}
	p, ok := ctx.Value(pendingKey{}).(pendingDial)
	if !ok {
		p = pendingDial{host: address, lists: g.allow}
	}
	for _, a := range p.lists {
		if !a.allowsAddr(ip) {
			dest := address
			if p.host != address {
				dest = p.host + " (" + address + ")"
			}
			return &RefusedError{Destination: dest, Rule: a.Rule()}
		}
	}
	return nil
}

type guardKey struct{}

// NewContext returns ctx carrying g, for connections made through a process-wide client
// (go-git's protocol table) on behalf of one sink: see ContextTransport.
func NewContext(ctx context.Context, g *Guard) context.Context {
	return context.WithValue(ctx, guardKey{}, g)
}

// ContextTransport is an HTTP transport for a client shared by every sink of the process: each
// request dials through the guard its context carries (NewContext), fallback when it carries
// none. It is a plain *http.Transport because go-git clones it to set a sink's CA bundle.
// Keep-alives are off: a pooled connection one sink's scopes allowed must not serve another
// sink's request, and git exports make a few requests per debounced export.
func ContextTransport(fallback *Guard) *http.Transport {
	t := fallback.Transport()
	t.DisableKeepAlives = true
	t.DialContext = func(ctx context.Context, network, address string) (net.Conn, error) {
		return guardOf(ctx, fallback).DialContext(ctx, network, address)
	}
	t.Proxy = func(r *http.Request) (*url.URL, error) { return guardOf(r.Context(), fallback).proxyFor(r) }
	return t
}

func guardOf(ctx context.Context, fallback *Guard) *Guard {
	if g, ok := ctx.Value(guardKey{}).(*Guard); ok {
		return g
	}
	return fallback
}

// CheckResolved is the dial-time check of one resolved address of host, for a client that
// dials by itself (go-git's SSH transport): the policy's rules and the allowlists host does
// not satisfy by name.
func (g *Guard) CheckResolved(host string, ip netip.Addr) error {
	if rule := g.CheckAddr(ip); rule != "" {
		return &RefusedError{Destination: host + " (" + ip.String() + ")", Rule: rule}
	}
	pending, err := g.checkHost(host)
	if err != nil {
		return err
	}
	return g.checkResolved(context.WithValue(context.Background(), pendingKey{}, pendingDial{host: host, lists: pending}), ip.String(), ip)
}
