package gitrepo

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"

	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"golang.org/x/crypto/ssh"

	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/egress"
)

// go-git picks its HTTP client from a process-wide protocol table, so the guarded client is
// installed once, by the first sink opened; each operation then dials through the guard of
// its sink, which the mirror puts in the operation's context (egress.NewContext), with the
// first sink's guard (the agent's policy) as the fallback.
var installHTTP sync.Once

func useGuard(g *egress.Guard) {
	installHTTP.Do(func() {
		c := githttp.NewClient(&http.Client{Transport: egress.ContextTransport(g)})
		client.InstallProtocol("http", c)
		client.InstallProtocol("https", c)
	})
}

// checkRemote refuses a remote the guard refuses: file:// (and plain paths) unless local
// destinations are allowed, metadata and link-local hosts always. HTTP(S) remotes are also
// checked on every dial. An SSH remote's host is the one go-git's own endpoint parser finds
// (the one it will dial), checked here after resolving it, and the address SSH actually
// connected to is checked again before any credential is sent (guardHostKey).
func checkRemote(ctx context.Context, g *egress.Guard, remote string) error {
	ep, err := transport.NewEndpoint(remote)
	if err != nil {
		return sink.TerminalError(fmt.Errorf("git remote %s: %w", redact(remote), err))
	}
	switch ep.Protocol {
	case "file": // file://, an absolute or a relative path
		if err := g.CheckFile(ep.Path); err != nil {
			return sink.TerminalError(err)
		}
		return nil
	case "ssh":
	default:
		if err := g.CheckURL(remote); err != nil {
			return sink.TerminalError(err)
		}
		if err := g.CheckHost(ep.Host); err != nil {
			return sink.TerminalError(err)
		}
		return nil
	}
	host := ep.Host
	if err := g.CheckHost(host); err != nil {
		return sink.TerminalError(err)
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil // unresolvable now: the push reports it
	}
	for _, a := range addrs {
		if err := g.CheckResolved(host, a); err != nil {
			return sink.TerminalError(err)
		}
	}
	return nil
}

// guardHostKey wraps an SSH host key check with the guard: the address the connection
// reached is checked (a name that resolved elsewhere since checkRemote, or a proxy's
// doing) before the host key is accepted, so before authentication sends anything.
// inner is the known-hosts check; nil means go-git's default (the user's known_hosts).
func guardHostKey(g *egress.Guard, inner ssh.HostKeyCallback) ssh.HostKeyCallback {
	return func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		host := hostname // "host:port" as SSH passes it; the guard's allowlists name hosts
		if h, _, err := net.SplitHostPort(hostname); err == nil {
			host = h
		}
		if tcp, ok := remote.(*net.TCPAddr); ok {
			if ip, ok := netip.AddrFromSlice(tcp.IP); ok {
				if err := g.CheckResolved(host, ip.Unmap()); err != nil {
					return err
				}
			}
		}
		if inner == nil {
			def, err := gitssh.NewKnownHostsCallback()
			if err != nil {
				return err
			}
			inner = def
		}
		return inner(hostname, remote, key)
	}
}
