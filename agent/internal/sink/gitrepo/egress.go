package gitrepo

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/go-git/go-git/v5/plumbing/transport/client"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"

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
// checked on every dial; go-git's SSH transport takes no dialer, so an SSH host is checked
// here, after resolving it.
func checkRemote(ctx context.Context, g *egress.Guard, remote string) error {
	if !isSSH(remote) {
		if err := g.CheckURL(remote); err != nil {
			return sink.TerminalError(err)
		}
		return nil
	}
	host := sshHost(remote)
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

// sshHost is the host of ssh://user@host:port/path or user@host:path.
func sshHost(remote string) string {
	rest := strings.TrimPrefix(remote, "ssh://")
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest = rest[i+1:]
	}
	if strings.HasPrefix(rest, "[") {
		if i := strings.Index(rest, "]"); i > 0 {
			return rest[1:i]
		}
	}
	if i := strings.IndexAny(rest, ":/"); i >= 0 {
		rest = rest[:i]
	}
	return rest
}
