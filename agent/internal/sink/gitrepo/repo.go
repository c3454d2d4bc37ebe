package gitrepo

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	gogit "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/memory"
	"golang.org/x/crypto/ssh/knownhosts"

	"kollect.dev/agent/internal/sink"
)

const remoteName = "origin"

// mirror is the bare clone of the remote in the sink's cache directory. It is shallow: each
// fetch asks for the wanted tips alone (depth 1), never their history, so an agent joining a
// repository that 500 clusters have committed to for a year downloads one tree, not the year.
// Pushes need no history either: a commit is built on the fetched tip, which the remote has.
type mirror struct {
	dir   string
	url   string
	creds Credentials
	repo  *gogit.Repository
	// depth is 1 (shallow fetches) except for local remotes: the agent serves those in
	// process with go-git's server, which refuses shallow requests; a local repository's
	// history costs disk, not transfer.
	depth int
}

// openMirror opens or creates the bare mirror at dir with remote origin at url. A mirror
// left by an earlier process is reused, so restarts fetch only what is new.
func openMirror(dir, url string, creds Credentials) (*mirror, error) {
	repo, err := openRepo(dir)
	if err != nil {
		return nil, err
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
	m := &mirror{dir: dir, url: url, creds: creds, repo: repo, depth: 1}
	if ep, err := transport.NewEndpoint(url); err == nil && ep.Protocol == "file" { // file:// or a path
		m.depth = 0
	}
	if m.depth == 1 && m.full() {
		// A full clone an earlier version left: its history would be walked by every
		// pruning of the shallow list (shallow.go). It is a cache: start a shallow one.
		if err := os.RemoveAll(dir); err != nil {
			return nil, fmt.Errorf("clearing git cache %s: %w", dir, err)
		}
		return openMirror(dir, url, creds)
	}
	return m, nil
}

// full reports whether the mirror holds history that no shallow fetch brought: it has refs
// but no shallow list. (A mirror whose only commits are its own root commits, pushed into an
// empty repository, looks the same and is started afresh too: one tip fetch.)
func (m *mirror) full() bool {
	if shallow, err := m.repo.Storer.Shallow(); err != nil || len(shallow) > 0 {
		return false
	}
	refs, err := m.repo.Storer.IterReferences()
	if err != nil {
		return false
	}
	found := false
	_ = refs.ForEach(func(r *plumbing.Reference) error {
		if r.Type() == plumbing.HashReference {
			found = true
			return storer.ErrStop
		}
		return nil
	})
	return found
}

// objectCache bounds the decoded objects go-git keeps from the mirror's packs. Its default
// (96 MiB) is sized for tools browsing history; the sink reads the trees an export touches
// once per round, and the cache would mostly hold the agent's memory limit hostage.
const objectCache = 8 * cache.MiByte

// openRepo opens the bare repository at dir, creating it when missing, with a small object
// cache.
func openRepo(dir string) (*gogit.Repository, error) {
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
	fs, ok := repo.Storer.(*filesystem.Storage)
	if !ok {
		return repo, nil
	}
	repo, err = gogit.Open(filesystem.NewStorage(fs.Filesystem(), cache.NewObjectLRU(objectCache)), nil)
	if err != nil {
		return nil, fmt.Errorf("opening git cache %s: %w", dir, err)
	}
	return repo, nil
}

// listRemote returns the remote's refs that name an object (branches, and refs such as the
// contender marks), by full name. An empty repository has none.
func listRemote(ctx context.Context, url string, creds Credentials) (map[plumbing.ReferenceName]plumbing.Hash, error) {
	r := gogit.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: remoteName, URLs: []string{url}})
	refs, err := r.ListContext(ctx, &gogit.ListOptions{Auth: creds.Auth, CABundle: creds.CABundle, InsecureSkipTLS: creds.InsecureSkipVerify})
	if errors.Is(err, transport.ErrEmptyRemoteRepository) {
		return map[plumbing.ReferenceName]plumbing.Hash{}, nil
	}
	if err != nil {
		return nil, classify("listing "+redact(url), err)
	}
	out := map[plumbing.ReferenceName]plumbing.Hash{}
	for _, ref := range refs {
		if ref.Type() == plumbing.HashReference {
			out[ref.Name()] = ref.Hash()
		}
	}
	return out, nil
}

// localName is where the mirror keeps a remote ref: branches as remote-tracking refs
// (refs/remotes/origin/<branch>), which the sink's own pushes never move by hand; other refs
// under their own name.
func localName(ref plumbing.ReferenceName) plumbing.ReferenceName {
	if ref.IsBranch() {
		return plumbing.NewRemoteReferenceName(remoteName, ref.Short())
	}
	return ref
}

// fetch brings the named refs up to date in the mirror and returns the tips of those that
// exist on the remote. Only tips the mirror lacks are fetched, each alone (depth 1).
func (m *mirror) fetch(ctx context.Context, refs ...plumbing.ReferenceName) (map[plumbing.ReferenceName]plumbing.Hash, error) {
	remote, err := listRemote(ctx, m.url, m.creds)
	if err != nil {
		return nil, err
	}
	tips := map[plumbing.ReferenceName]plumbing.Hash{}
	var missing []plumbing.ReferenceName
	for _, ref := range refs {
		h, ok := remote[ref]
		if !ok {
			continue
		}
		tips[ref] = h
		if !m.has(h) {
			missing = append(missing, ref)
		}
	}
	if len(missing) == 0 {
		return tips, nil
	}
	if err := m.fetchRefs(ctx, missing); err != nil {
		return nil, err
	}
	// Housekeeping: a list that could not be pruned stays as it is, and the next fetch
	// tries again; the export does not depend on it.
	_ = m.pruneShallow()
	if m.fetched(tips, missing) {
		return tips, nil
	}
	return m.refetch(ctx, tips)
}

// fetched updates the tips of the refs just fetched to what the fetch brought (the remote
// may have moved on between the listing and the fetch, and a shallow fetch holds the new tip
// only) and reports whether the mirror has each of them.
func (m *mirror) fetched(tips map[plumbing.ReferenceName]plumbing.Hash, refs []plumbing.ReferenceName) bool {
	for _, ref := range refs {
		if local, err := m.repo.Storer.Reference(localName(ref)); err == nil {
			tips[ref] = local.Hash()
		}
		if !m.has(tips[ref]) {
			return false
		}
	}
	return true
}

func (m *mirror) has(h plumbing.Hash) bool {
	_, err := m.repo.Storer.EncodedObject(plumbing.AnyObject, h)
	return err == nil
}

// fetchRefs fetches refs into their local names (localName), forced: the mirror follows the
// remote wherever it goes.
func (m *mirror) fetchRefs(ctx context.Context, refs []plumbing.ReferenceName) error {
	specs := make([]config.RefSpec, len(refs))
	for i, ref := range refs {
		specs[i] = config.RefSpec("+" + ref.String() + ":" + localName(ref).String())
	}
	err := m.repo.FetchContext(ctx, &gogit.FetchOptions{RemoteName: remoteName, RefSpecs: specs, Depth: m.depth, Auth: m.creds.Auth,
		CABundle: m.creds.CABundle, InsecureSkipTLS: m.creds.InsecureSkipVerify, Tags: gogit.NoTags})
	if err != nil && !errors.Is(err, gogit.NoErrAlreadyUpToDate) {
		return classify("fetching "+redact(m.url), err)
	}
	return nil
}

// refetch starts the mirror afresh and fetches every tip again when a fetch left one missing.
// A shallow mirror can get there when the remote moved a branch back (a forced push to an
// ancestor of a tip the mirror has): the fetch announces the newer tip as had, the server
// takes its ancestors as had too and sends nothing (go-git/go-git#1443). The mirror is a
// cache; nothing in it is needed beyond what the remote has.
func (m *mirror) refetch(ctx context.Context, tips map[plumbing.ReferenceName]plumbing.Hash) (map[plumbing.ReferenceName]plumbing.Hash, error) {
	if err := os.RemoveAll(m.dir); err != nil {
		return nil, fmt.Errorf("clearing git cache %s: %w", m.dir, err)
	}
	fresh, err := openMirror(m.dir, m.url, m.creds)
	if err != nil {
		return nil, err
	}
	m.repo = fresh.repo
	refs := make([]plumbing.ReferenceName, 0, len(tips))
	for ref := range tips {
		refs = append(refs, ref) // the new mirror has none of them
	}
	if err := m.fetchRefs(ctx, refs); err != nil {
		return nil, err
	}
	if !m.fetched(tips, refs) {
		return nil, sink.TransientError(fmt.Errorf("fetching from %s: a fetched tip is still missing in a new mirror", redact(m.url)))
	}
	return tips, nil
}

// push publishes commit, built on old (zero: the branch does not exist yet), as branch,
// sending the commit's new objects from the pack file and, once the remote took them, storing
// the pack in the mirror. Never forced: errConflict means the remote moved on.
func (m *mirror) push(ctx context.Context, branch string, old, commit plumbing.Hash, pack string) error {
	ref := plumbing.NewBranchReferenceName(branch)
	err := m.sendPack(ctx, ref, old, commit, pack)
	switch {
	case err == nil:
	case isAuthError(err), errors.Is(err, transport.ErrRepositoryNotFound), ctx.Err() != nil:
		return classify("pushing to "+redact(m.url), err)
	default:
		// A rejected update (the ref moved before or while we pushed) and any other push
		// failure: fetch, re-apply and try again.
		return fmt.Errorf("%w: %v", errConflict, err)
	}
	if err := storePackFile(m.repo.Storer, pack); err != nil {
		// The remote has the commit: the next fetch brings it into the mirror.
		return err
	}
	for _, name := range []plumbing.ReferenceName{ref, plumbing.NewRemoteReferenceName(remoteName, branch)} {
		if err := m.repo.Storer.SetReference(plumbing.NewHashReference(name, commit)); err != nil {
			return fmt.Errorf("updating %s: %w", name, err)
		}
	}
	return nil
}

// pushMark moves the contender mark ref from old (zero: none yet) to the staged mark commit.
// The mirror does not keep it: the refused agent never reads its own mark.
func (m *mirror) pushMark(ctx context.Context, ref plumbing.ReferenceName, old, commit plumbing.Hash, staging *memory.Storage) error {
	pack, err := writePack(filepath.Dir(m.dir), staging)
	if err != nil {
		return err
	}
	defer os.Remove(pack)
	if err := m.sendPack(ctx, ref, old, commit, pack); err != nil {
		return classify("pushing "+ref.String()+" to "+redact(m.url), err)
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
