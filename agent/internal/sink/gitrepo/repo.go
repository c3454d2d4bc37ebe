package gitrepo

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	gogit "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage/memory"
	"golang.org/x/crypto/ssh/knownhosts"

	"kollect.dev/agent/internal/sink"
)

const remoteName = "origin"

// mirror is the bare clone of the remote in the sink's cache directory.
type mirror struct {
	url   string
	creds Credentials
	repo  *gogit.Repository
}

// openMirror opens or creates the bare mirror at dir with remote origin at url. A mirror
// left by an earlier process is reused, so restarts fetch only what is new.
func openMirror(dir, url string, creds Credentials) (*mirror, error) {
	repo, err := gogit.PlainOpen(dir)
	if errors.Is(err, gogit.ErrRepositoryNotExists) {
		if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
			return nil, fmt.Errorf("creating cache dir: %w", err)
		}
		repo, err = gogit.PlainInit(dir, true)
	}
	if err != nil {
		return nil, fmt.Errorf("opening git cache %s: %w", dir, err)
	}
	// No delta search when packing pushes: go-git's delta selector costs minutes and
	// gigabytes on 100k-file inventories or multi-megabyte documents, while zlib alone
	// already shrinks YAML several times over. Servers repack as they see fit.
	cfg, err := repo.Config()
	if err != nil {
		return nil, fmt.Errorf("reading git cache config: %w", err)
	}
	if cfg.Pack.Window != 0 {
		cfg.Pack.Window = 0
		if err := repo.SetConfig(cfg); err != nil {
			return nil, fmt.Errorf("writing git cache config: %w", err)
		}
	}
	if r, err := repo.Remote(remoteName); err == nil && (len(r.Config().URLs) != 1 || r.Config().URLs[0] != url) {
		_ = repo.DeleteRemote(remoteName) // the spec's URL changed
	}
	if _, err := repo.Remote(remoteName); err != nil {
		if _, err := repo.CreateRemote(&config.RemoteConfig{Name: remoteName, URLs: []string{url}}); err != nil {
			return nil, fmt.Errorf("configuring remote: %w", err)
		}
	}
	return &mirror{url: url, creds: creds, repo: repo}, nil
}

// listRemote returns the remote's branch heads. An empty repository has none.
func listRemote(ctx context.Context, url string, creds Credentials) (map[string]plumbing.Hash, error) {
	r := gogit.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: remoteName, URLs: []string{url}})
	refs, err := r.ListContext(ctx, &gogit.ListOptions{Auth: creds.Auth, CABundle: creds.CABundle, InsecureSkipTLS: creds.InsecureSkipVerify})
	if errors.Is(err, transport.ErrEmptyRemoteRepository) {
		return map[string]plumbing.Hash{}, nil
	}
	if err != nil {
		return nil, classify("listing "+redact(url), err)
	}
	heads := map[string]plumbing.Hash{}
	for _, ref := range refs {
		if ref.Name().IsBranch() && ref.Type() == plumbing.HashReference {
			heads[ref.Name().Short()] = ref.Hash()
		}
	}
	return heads, nil
}

// fetch brings the named branches up to date in the mirror (refs/remotes/origin/<branch>)
// and returns the tips of those that exist on the remote.
func (m *mirror) fetch(ctx context.Context, branches ...string) (map[string]plumbing.Hash, error) {
	heads, err := listRemote(ctx, m.url, m.creds)
	if err != nil {
		return nil, err
	}
	tips := map[string]plumbing.Hash{}
	var specs []config.RefSpec
	for _, b := range branches {
		h, ok := heads[b]
		if !ok {
			continue
		}
		tips[b] = h
		if _, err := m.repo.Storer.EncodedObject(plumbing.CommitObject, h); err != nil {
			specs = append(specs, config.RefSpec("+refs/heads/"+b+":refs/remotes/"+remoteName+"/"+b))
		}
	}
	if len(specs) > 0 {
		err := m.repo.FetchContext(ctx, &gogit.FetchOptions{RemoteName: remoteName, RefSpecs: specs, Auth: m.creds.Auth,
			CABundle: m.creds.CABundle, InsecureSkipTLS: m.creds.InsecureSkipVerify, Tags: gogit.NoTags})
		if err != nil && !errors.Is(err, gogit.NoErrAlreadyUpToDate) {
			return nil, classify("fetching "+redact(m.url), err)
		}
	}
	return tips, nil
}

// push publishes commit as branch, never forced. errConflict means the remote moved on.
func (m *mirror) push(ctx context.Context, branch string, commit plumbing.Hash) error {
	local := plumbing.NewBranchReferenceName(branch)
	if err := m.repo.Storer.SetReference(plumbing.NewHashReference(local, commit)); err != nil {
		return fmt.Errorf("updating %s: %w", local, err)
	}
	spec := config.RefSpec(local.String() + ":" + local.String()) // no leading "+": never force
	err := m.repo.PushContext(ctx, &gogit.PushOptions{RemoteName: remoteName, RefSpecs: []config.RefSpec{spec},
		Auth: m.creds.Auth, CABundle: m.creds.CABundle, InsecureSkipTLS: m.creds.InsecureSkipVerify})
	switch {
	case err == nil, errors.Is(err, gogit.NoErrAlreadyUpToDate):
	case isAuthError(err), errors.Is(err, transport.ErrRepositoryNotFound), ctx.Err() != nil:
		return classify("pushing to "+redact(m.url), err)
	default:
		// A rejected update (non-fast-forward, or a ref that moved while we pushed) and any
		// other push failure: fetch, re-apply and try again.
		return fmt.Errorf("%w: %v", errConflict, err)
	}
	tracking := plumbing.NewRemoteReferenceName(remoteName, branch)
	if err := m.repo.Storer.SetReference(plumbing.NewHashReference(tracking, commit)); err != nil {
		return fmt.Errorf("updating %s: %w", tracking, err)
	}
	return nil
}

var errConflict = errors.New("push rejected")

func isAuthError(err error) bool {
	return errors.Is(err, transport.ErrAuthenticationRequired) || errors.Is(err, transport.ErrAuthorizationFailed) ||
		errors.Is(err, transport.ErrInvalidAuthMethod) ||
		// x/crypto/ssh reports a refused key as text only.
		strings.Contains(err.Error(), "ssh: unable to authenticate")
}

// classify wraps err with op and marks credentials and missing repositories terminal;
// everything else (network, timeouts, server errors) is transient.
func classify(op string, err error) error {
	wrapped := fmt.Errorf("%s: %w", op, err)
	switch {
	case ctxErr(err):
		return sink.TransientError(wrapped)
	case isAuthError(err):
		return sink.TerminalError(fmt.Errorf("%s: credentials refused: %w", op, err))
	case errors.Is(err, transport.ErrRepositoryNotFound), isCertificateError(err):
		return sink.TerminalError(wrapped)
	default:
		return sink.TransientError(wrapped)
	}
}

// isCertificateError: an untrusted or mismatched server certificate or SSH host key stays so
// until the TLS settings or known_hosts change.
func isCertificateError(err error) bool {
	var unknown x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var host x509.HostnameError
	var verify *tls.CertificateVerificationError
	var hostKey *knownhosts.KeyError
	return errors.As(err, &unknown) || errors.As(err, &invalid) || errors.As(err, &host) || errors.As(err, &verify) ||
		errors.As(err, &hostKey) || strings.Contains(err.Error(), "knownhosts: key")
}

func ctxErr(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// backoff sleeps before retry attempt n (1-based): 50 ms doubling to 1.6 s, with full
// jitter so agents that collided do not collide again in lockstep.
func backoff(ctx context.Context, n int) error {
	d := time.Duration(50<<min(n, 5)) * time.Millisecond
	t := time.NewTimer(time.Duration(rand.Int64N(int64(d))) + 10*time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
