package gitrepo

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"

	"kollect.dev/agent/internal/sink"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

// Secret keys the git sinks read from their secretRef.
const (
	KeyToken         = "token"
	KeyUsername      = "username"
	KeyPassword      = "password"
	KeySSHPrivateKey = "ssh-privatekey"
	KeySSHPassphrase = "ssh-passphrase"
	KeyKnownHosts    = "known_hosts"
)

// Credentials is how to reach a remote.
type Credentials struct {
	Auth               transport.AuthMethod
	CABundle           []byte
	InsecureSkipVerify bool
}

// ResolveCredentials reads the secretRef and TLS settings of cfg through env.Secrets.
// tokenUser is the basic-auth user name sent with a token when the Secret has no username
// (GitLab accepts "oauth2"; most forges accept any name with a token as password). A missing
// Secret or key is terminal: only a change of configuration or Secret fixes it.
func ResolveCredentials(ctx context.Context, cfg *v1alpha1.GitSinkConfig, env sink.Env, tokenUser string) (Credentials, error) {
	var c Credentials
	if cfg.TLS != nil {
		c.InsecureSkipVerify = cfg.TLS.InsecureSkipVerify
		if ref := cfg.TLS.CASecretRef; ref != nil {
			data, err := secret(ctx, env, ref.Name)
			if err != nil {
				return c, err
			}
			if len(data[ref.Key]) == 0 {
				return c, sink.Terminalf("secret %s has no key %s (CA bundle)", ref.Name, ref.Key)
			}
			c.CABundle = data[ref.Key]
		}
	}
	if cfg.SecretRef == nil {
		return c, nil
	}
	data, err := secret(ctx, env, cfg.SecretRef.Name)
	if err != nil {
		return c, err
	}
	ssh := isSSH(cfg.URL)
	switch {
	case ssh && len(data[KeySSHPrivateKey]) > 0:
		user := "git"
		if ep, err := transport.NewEndpoint(cfg.URL); err == nil && ep.User != "" {
			user = ep.User
		}
		keys, err := gitssh.NewPublicKeys(user, data[KeySSHPrivateKey], string(data[KeySSHPassphrase]))
		if err != nil {
			return c, sink.TerminalError(fmt.Errorf("secret %s: parsing %s: %w", cfg.SecretRef.Name, KeySSHPrivateKey, err))
		}
		if kh := data[KeyKnownHosts]; len(kh) > 0 {
			// knownhosts reads files only: keep the Secret's copy in the private cache.
			file := filepath.Join(env.CacheDir, "known_hosts")
			if err := os.MkdirAll(env.CacheDir, 0o700); err != nil {
				return c, fmt.Errorf("creating cache dir: %w", err)
			}
			if err := os.WriteFile(file, kh, 0o600); err != nil {
				return c, fmt.Errorf("writing known_hosts: %w", err)
			}
			cb, err := gitssh.NewKnownHostsCallback(file)
			if err != nil {
				return c, sink.TerminalError(fmt.Errorf("secret %s: parsing %s: %w", cfg.SecretRef.Name, KeyKnownHosts, err))
			}
			keys.HostKeyCallback = cb
		}
		if env.Egress != nil {
			keys.HostKeyCallback = guardHostKey(env.Egress, keys.HostKeyCallback)
		}
		c.Auth = keys
	case ssh:
		return c, sink.Terminalf("secret %s: an ssh:// remote needs %s", cfg.SecretRef.Name, KeySSHPrivateKey)
	case len(data[KeyToken]) > 0:
		user := string(data[KeyUsername])
		if user == "" {
			user = tokenUser
		}
		c.Auth = &githttp.BasicAuth{Username: user, Password: strings.TrimSpace(string(data[KeyToken]))}
	case len(data[KeyUsername]) > 0:
		c.Auth = &githttp.BasicAuth{Username: string(data[KeyUsername]), Password: string(data[KeyPassword])}
	default:
		return c, sink.Terminalf("secret %s holds none of %s, %s/%s, %s", cfg.SecretRef.Name, KeyToken, KeyUsername, KeyPassword, KeySSHPrivateKey)
	}
	return c, nil
}

func secret(ctx context.Context, env sink.Env, name string) (map[string][]byte, error) {
	if env.Secrets == nil {
		return nil, sink.Terminalf("secret %s: no secret reader configured", name)
	}
	data, err := env.Secrets(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("reading secret %s: %w", name, err)
	}
	return data, nil
}

// isSSH says whether go-git will reach u over SSH: an ssh:// URL, or what its endpoint parser
// takes for scp-like syntax ([user@]host:path, the user optional).
func isSSH(u string) bool {
	ep, err := transport.NewEndpoint(u)
	return err == nil && ep.Protocol == "ssh"
}

// redact drops credentials embedded in a URL, for messages and previews.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil || u.Scheme == "" {
		return raw
	}
	u.User = nil
	return u.String()
}
