package sink

import (
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing/transport"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kollect.dev/api/validation"
)

// natsReads is the URL nats.go connects to for a configured server: nats:// is added to one
// without a scheme (nats.go's addURLToPool), then net/url parses it.
func natsReads(server string) (*url.URL, bool) {
	if !strings.Contains(server, "://") {
		server = "nats://" + server
	}
	u, err := url.Parse(server)
	return u, err == nil
}

// thisMachine says whether host is loopback or localhost: a connection that stays in the pod.
func thisMachine(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// FuzzCredentialChecksAsClientsRead: the webhook's credential checks (package validation) see
// a URL as the client that uses it does. A password, or a user name the client sends as a
// secret, is refused wherever it is: in a git remote as go-git reads it (a user name over
// HTTP is a token), in an endpoint as net/url reads it, in a NATS server as nats.go reads it
// (a server without a scheme is nats://, and a user name without a password is a token). A
// NATS server nats.go reaches in plaintext, on another machine, with the sink's credentials,
// needs a grant.
func FuzzCredentialChecksAsClientsRead(f *testing.F) {
	for _, s := range []string{
		"https://git.example.com/team/r.git", "https://oauth2:glpat-x@gitlab.example.com/team/r.git",
		"https://glpat-x@gitlab.example.com/", "ssh://git@git.example.com/team/r.git", "ssh://git:pw@git.example.com/r.git",
		"git@git.example.com:team/r.git", "git:pw@git.example.com:team/r.git", "user:p@ss@host:team/r.git",
		"HTTPS://u:p@h/", "http://u:@h/", "https://h/?private_token=x", "https://h/r.git#u:p@x",
		"nats://nats.example.com:4222", "tls://nats.example.com:4222", "s3cr3t-token@nats.example.com:4222",
		"user:pw@nats.example.com", "nats.example.com:4222", "10.0.0.5:4222", "demo.nats.io",
		"nats://127.0.0.1:4222", "localhost:4222", "ws://nats.example.com:8080", "NATS://nats.example.com",
		"nats://[::ffff:127.0.0.1]:4222", "nats://tok@[::1]:4222", "%zz@h", "nats://h:4222?token=x",
	} {
		f.Add(s)
	}
	path := field.NewPath("spec")
	f.Fuzz(func(t *testing.T, s string) {
		for _, typ := range []string{"git", "gitlab", "s3"} {
			key := map[string]string{"git": "url", "gitlab": "baseURL", "s3": "endpoint"}[typ]
			spec := map[string]any{typ: map[string]any{key: s}}
			flagged := len(validation.InlineCredentials(path, spec)) > 0
			// A user name alone is no secret in an ssh:// remote (package validation); a URL
			// without a scheme ("//@", "//tok@h") no client connects to.
			if u, err := url.Parse(s); err == nil && u.User != nil && u.Scheme != "" && typ != "git" && !flagged {
				if pw, set := u.User.Password(); pw != "" || (set || u.User.Username() != "") && !strings.EqualFold(u.Scheme, "ssh") {
					t.Fatalf("%s.%s %q: net/url reads user information %q, and InlineCredentials says nothing", typ, key, s, u.User.Username())
				}
			}
			if typ != "git" {
				continue
			}
			ep, err := transport.NewEndpoint(s)
			if err != nil {
				continue
			}
			secret := ep.Password != "" || (ep.User != "" && (ep.Protocol == "http" || ep.Protocol == "https"))
			if secret && !flagged {
				t.Fatalf("git.url %q: go-git sends user %q and password %q over %s, and InlineCredentials says nothing", s, ep.User, ep.Password, ep.Protocol)
			}
		}
		spec := map[string]any{"nats": map[string]any{"servers": []any{s}, "secretRef": map[string]any{"name": "n"}}}
		u, ok := natsReads(s)
		if !ok || !slices.Contains([]string{"nats", "tls", "ws", "wss"}, u.Scheme) {
			return
		}
		if u.User != nil && len(validation.InlineCredentials(path, spec)) == 0 {
			t.Fatalf("nats server %q: nats.go logs in with %q from it, and InlineCredentials says nothing", s, u.User.Username())
		}
		if (u.Scheme == "nats" || u.Scheme == "ws") && u.Hostname() != "" && !thisMachine(u.Hostname()) {
			for _, w := range validation.InsecureTLS(path, spec) {
				if w.Field.String() == "spec.nats.servers[0]" {
					return
				}
			}
			t.Fatalf("nats server %q: nats.go logs in over plaintext %s to %s, and InsecureTLS says nothing", s, u.Scheme, u.Hostname())
		}
	})
}
