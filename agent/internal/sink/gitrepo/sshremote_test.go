package gitrepo

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing/transport"
	"golang.org/x/crypto/ssh"

	"kollect.dev/agent/internal/sink/egress"
)

// TestSSHRemoteHostIsTheOneDialled: the guard judges the host go-git's endpoint parser finds,
// the one it dials, whatever user, path or '@' the remote carries: a metadata address with a
// harmless-looking name later in the path is refused.
func TestSSHRemoteHostIsTheOneDialled(t *testing.T) {
	g := egress.New(egress.Policy{})
	for _, remote := range []string{
		"ssh://169.254.169.254/x@ok.example/r.git",
		"ssh://git@169.254.169.254:22/x@ok.example/r.git",
		"git@169.254.169.254:team/r.git",
		"ssh://ok.example@169.254.169.254/r.git",
	} {
		err := checkRemote(context.Background(), g, remote)
		if err == nil || !strings.Contains(err.Error(), "169.254.169.254") {
			t.Errorf("%s: checkRemote = %v, want the metadata address refused", remote, err)
		}
	}
}

// TestSSHConnectionCheckedBeforeAuthentication: the address an SSH connection reached is
// checked when the server shows its host key, before authentication sends the key: a
// refused address fails there and the known-hosts check is never consulted; an allowed one
// goes on to it.
func TestSSHConnectionCheckedBeforeAuthentication(t *testing.T) {
	g := egress.New(egress.Policy{})
	consulted := 0
	inner := func(string, net.Addr, ssh.PublicKey) error { consulted++; return nil }
	cb := guardHostKey(g, inner)
	if err := cb("git.example.com:22", &net.TCPAddr{IP: net.ParseIP("169.254.169.254"), Port: 22}, nil); err == nil || consulted != 0 {
		t.Fatalf("a connection to the metadata address: err %v, known hosts consulted %d times", err, consulted)
	}
	if err := cb("git.example.com:22", &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 22}, nil); err == nil {
		t.Fatal("a connection to loopback passed a guard that refuses local destinations")
	}
	if err := cb("git.example.com:22", &net.TCPAddr{IP: net.ParseIP("203.0.113.7"), Port: 22}, nil); err != nil || consulted != 1 {
		t.Fatalf("an allowed address: err %v, known hosts consulted %d times", err, consulted)
	}
	// A scope's allowlist names hosts: the port SSH adds to the name does not hide it.
	scoped := guardHostKey(g.Restrict(egress.Allowlist{Source: "KollectScope team-a/limits", Hosts: []string{"git.example.com"}}), inner)
	if err := scoped("git.example.com:22", &net.TCPAddr{IP: net.ParseIP("203.0.113.7"), Port: 22}, nil); err != nil {
		t.Fatalf("an allowlisted host: %v", err)
	}
	if err := scoped("other.example.com:22", &net.TCPAddr{IP: net.ParseIP("203.0.113.7"), Port: 22}, nil); err == nil {
		t.Fatal("a host outside the scope's allowlist passed")
	}
}

// FuzzRemoteCheckedAsDialled: whatever go-git makes of a remote (its endpoint parser decides
// the protocol and the host it will dial), a host the guard refuses by address is refused by
// checkRemote, and so is a local repository when local destinations are not allowed. A check
// that parsed remotes its own way (as one did: the last '@' for SSH, no scp-like remote
// without a user) lets some through.
func FuzzRemoteCheckedAsDialled(f *testing.F) {
	for _, s := range []string{
		"ssh://169.254.169.254/x@ok.example/r.git", "git@169.254.169.254:team/r.git",
		"169.254.169.254:team/r.git", "[fd00:ec2::254]:team/r.git", "ssh://[fd00:ec2::254]:22/r.git",
		"https://169.254.169.254/r.git", "http://user@100.100.100.200/r.git", "file:///etc/r.git",
		"/srv/r.git", "ssh://ok.example@169.254.169.254/r.git", "git@ok.example:team/r.git",
		"https://git.example.com/team/r.git",
	} {
		f.Add(s)
	}
	g := egress.New(egress.Policy{})
	f.Fuzz(func(t *testing.T, remote string) {
		ep, err := transport.NewEndpoint(remote)
		if err != nil {
			return
		}
		refused := ep.Protocol == "file"
		if ip, err := netip.ParseAddr(strings.Trim(ep.Host, "[]")); err == nil && g.CheckAddr(ip) != "" {
			refused = true
		}
		if refused && checkRemote(context.Background(), g, remote) == nil {
			t.Fatalf("%q: go-git would reach %s %q, and checkRemote let it through", remote, ep.Protocol, ep.Host)
		}
	})
}
