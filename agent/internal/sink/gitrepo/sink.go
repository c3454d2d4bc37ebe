package gitrepo

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/memory"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/egress"
	"kollect.dev/agent/internal/sink/snapshot"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

// maxAttempts bounds fetch-rebuild-push rounds within one export; past it the export fails
// transiently and the delivery worker retries later with backoff.
const maxAttempts = 10

// Sink commits snapshot documents to a git branch.
type Sink struct {
	cfg    v1alpha1.GitSinkConfig
	opts   snapshot.Options
	env    sink.Env
	branch string

	mu     sync.Mutex
	mirror *mirror
	// published maps a branch, cluster and inventory to the checksum and coverage digest
	// this sink last found or put there. Other agents only ever touch their own files, so
	// while both are unchanged there is nothing to render or fetch; a resync checks the
	// branch again.
	published map[string]held
}

// held is what a branch is known to hold for one inventory.
type held struct{ checksum, coverage string }

var _ sink.Sink = (*Sink)(nil)

// Open builds a sink from its git settings and the snapshot rendering options; the git and
// gitlab backends both build through it. tokenUser is the basic-auth user sent with a token.
func Open(ctx context.Context, cfg *v1alpha1.GitSinkConfig, ser v1alpha1.Serialization, layout v1alpha1.Layout, env sink.Env, tokenUser string) (*Sink, error) {
	opts, err := snapshot.NewOptions(ser, layout, v1alpha1.FormatYAML, false)
	if err != nil {
		return nil, err
	}
	if env.CacheDir == "" {
		return nil, sink.Terminalf("git sink %s/%s: no cache directory", env.Namespace, env.Name)
	}
	guard := env.Guard()
	if err := checkRemote(ctx, guard, cfg.URL); err != nil {
		return nil, fmt.Errorf("git sink %s/%s: %w", env.Namespace, env.Name, err)
	}
	useGuard(guard)
	useLocalTransport()
	creds, err := ResolveCredentials(ctx, cfg, env, tokenUser)
	if err != nil {
		return nil, err
	}
	c := *cfg
	if c.Branch == "" {
		c.Branch = "main"
	}
	if c.AuthorName == "" {
		c.AuthorName = "kollect"
	}
	if c.AuthorEmail == "" {
		c.AuthorEmail = "kollect@kollect.dev"
	}
	m, err := openMirror(filepath.Join(env.CacheDir, "mirror.git"), c.URL, creds)
	if err != nil {
		return nil, err
	}
	return &Sink{cfg: c, opts: opts, env: env, branch: c.Branch, mirror: m, published: map[string]held{}}, nil
}

// Branch is the branch the sink commits to.
func (s *Sink) Branch() string { return s.branch }

// Result tells what an export did.
type Result struct {
	// Commit is the new commit, zero when the branch already held the export.
	Commit plumbing.Hash
	// Subject is the first line of the commit message.
	Subject string
	// Attempts counts fetch-rebuild-push rounds (more than one after a concurrent push).
	Attempts int
}

// Export commits the batch's documents to the configured branch.
func (s *Sink) Export(ctx context.Context, b *sink.Batch) error {
	_, err := s.Publish(ctx, b, s.branch, "")
	return err
}

// Publish commits the batch's documents on top of branch, starting from base when branch
// does not exist yet (merge-request branches), or from an empty history when neither does.
// It commits only when the tree changes and retries on a concurrent push. The coverage file
// is written in the same commit as the documents; a batch that changes only the coverage
// commits that file alone.
func (s *Sink) Publish(ctx context.Context, b *sink.Batch, branch, base string) (Result, error) {
	ctx = egress.NewContext(ctx, s.env.Guard())
	s.mu.Lock()
	defer s.mu.Unlock()
	subject := Subject(s.cfg.CommitMessage, b.Envelope.Cluster, b.Envelope.Inventory, strconv.Itoa(b.Envelope.ItemCount), export.ShortChecksum(b.Envelope.Checksum))
	key := branch + "\x00" + b.Envelope.Cluster + "\x00" + b.Envelope.Inventory
	want := held{b.Envelope.Checksum, export.CoverageDigest(b.Envelope.Coverage)}
	if !b.Resync && s.published[key] == want {
		return Result{Subject: subject}, nil
	}
	// The diff applies when the branch holds its starting point, whatever coverage it holds:
	// a coverage-only batch has an empty diff and renders no document.
	incremental := !b.Resync && !b.Diff.Full && b.PreviousChecksum != "" && s.published[key].checksum == b.PreviousChecksum
	ch, err := s.change(b, incremental)
	if err != nil {
		return Result{}, err
	}
	stored := map[plumbing.Hash]bool{}
	for attempt := 1; ; attempt++ {
		branches := []string{branch}
		if base != "" && base != branch {
			branches = append(branches, base)
		}
		tips, err := s.mirror.fetch(ctx, branches...)
		if err != nil {
			return Result{}, err
		}
		parent, ok := tips[branch]
		if !ok && base != "" {
			parent = tips[base]
		}
		if !ok && ch.prune == nil {
			// The branch is gone (a merged merge-request branch, deleted): what we put
			// there is not known to be on the base, so render everything.
			if ch, err = s.change(b, false); err != nil {
				return Result{}, err
			}
		}
		commit, subject, err := s.commit(b, ch, stored, parent)
		if err != nil {
			return Result{}, err
		}
		if commit.IsZero() {
			s.published[key] = want
			return Result{Subject: subject, Attempts: attempt}, nil
		}
		err = s.mirror.push(ctx, branch, commit)
		if err == nil {
			s.published[key] = want
			s.env.Log.V(1).Info("pushed", "branch", branch, "commit", commit.String(), "attempts", attempt)
			return Result{Commit: commit, Subject: subject, Attempts: attempt}, nil
		}
		if !errors.Is(err, errConflict) {
			return Result{}, err
		}
		if attempt == maxAttempts {
			return Result{}, sink.TransientError(fmt.Errorf("pushing to %s %s: still rejected after %d attempts: %w", redact(s.cfg.URL), branch, attempt, err))
		}
		s.env.Log.V(1).Info("push rejected, re-applying on the new tip", "branch", branch, "attempt", attempt, "reason", err.Error())
		if err := backoff(ctx, attempt); err != nil {
			return Result{}, sink.TransientError(err)
		}
	}
}

// change is what an export writes: documents (with their blob hashes), and either the
// matcher of owned files to prune (a full render) or explicit paths to remove (a render of
// the documents a diff touches), and the coverage file (nil when the batch carries no
// coverage: a file there is removed).
type change struct {
	files  []snapshot.File
	blobs  []plumbing.Hash
	prune  *snapshot.Matcher
	remove []string

	coveragePath string
	coverage     *snapshot.File
	coverageBlob plumbing.Hash
}

// change renders the batch: only the documents its diff touches when incremental (the branch
// is known to hold the previous snapshot: this sink put or found it there, and the diff is
// relative to it), everything otherwise.
func (s *Sink) change(b *sink.Batch, incremental bool) (*change, error) {
	ch := &change{}
	if incremental {
		part, err := s.opts.RenderChanged(&b.Envelope, &b.Diff)
		if err != nil {
			return nil, err
		}
		ch.files, ch.remove = part.Files, part.Delete
	} else {
		rendered, err := s.opts.Render(&b.Envelope)
		if err != nil {
			return nil, err
		}
		ch.files, ch.prune = rendered.Files(), rendered.Matcher
	}
	ch.blobs = make([]plumbing.Hash, len(ch.files))
	ch.coveragePath = s.opts.CoveragePath(b.Envelope.Cluster, b.Envelope.Inventory)
	for i, f := range ch.files {
		if f.Path == ch.coveragePath {
			// Only a template that spells the coverage file's name gets here.
			return nil, sink.Terminalf("layout pathTemplate %q puts a document at %s, the inventory's coverage file", s.opts.Template, f.Path)
		}
		ch.blobs[i] = plumbing.ComputeHash(plumbing.BlobObject, f.Data)
	}
	if f, ok := s.opts.CoverageFile(&b.Envelope); ok {
		ch.coverage, ch.coverageBlob = &f, plumbing.ComputeHash(plumbing.BlobObject, f.Data)
	}
	return ch, nil
}

// commit applies the rendered documents to parent's tree and stores a commit when the tree
// changed; it returns the zero hash when parent already holds the export.
func (s *Sink) commit(b *sink.Batch, ch *change, stored map[plumbing.Hash]bool, parent plumbing.Hash) (plumbing.Hash, string, error) {
	store := s.mirror.repo.Storer
	var baseTree plumbing.Hash
	if !parent.IsZero() {
		c, err := object.GetCommit(store, parent)
		if err != nil {
			return plumbing.ZeroHash, "", fmt.Errorf("reading commit %s: %w", parent, err)
		}
		baseTree = c.TreeHash
	}
	// New objects are staged in memory and stored as one packfile once the commit exists:
	// 100k loose objects would cost 100k temporary files, and the push reads packs faster.
	staging := memory.NewStorage()
	ed := newTreeEditor(store, staging, baseTree)
	var err error
	var docs docChanges
	keep := make(map[string]bool, len(ch.files))
	blobs := ch.blobs
	for i, f := range ch.files {
		keep[f.Path] = true
		_, existed, err := ed.Get(f.Path)
		if err != nil {
			return plumbing.ZeroHash, "", err
		}
		changed, err := ed.Put(f.Path, blobs[i])
		if err != nil {
			return plumbing.ZeroHash, "", err
		}
		if !changed {
			continue
		}
		if existed {
			docs.changed = append(docs.changed, f.Path)
		} else {
			docs.added = append(docs.added, f.Path)
		}
		if !stored[blobs[i]] {
			if err := stageBlob(staging, f); err != nil {
				return plumbing.ZeroHash, "", err
			}
		}
	}
	if docs.coverage, err = putCoverage(ed, staging, ch, stored); err != nil {
		return plumbing.ZeroHash, "", err
	}
	if m := ch.prune; m != nil {
		// Prune: documents of this cluster and inventory that the export no longer holds.
		err := ed.Walk(m.Prefix, func(path string, _ plumbing.Hash) {
			if !keep[path] && m.Match(path) {
				docs.removed = append(docs.removed, path)
			}
		})
		if err != nil {
			return plumbing.ZeroHash, "", err
		}
	}
	for _, p := range ch.remove {
		if _, ok, err := ed.Get(p); err != nil {
			return plumbing.ZeroHash, "", err
		} else if ok {
			docs.removed = append(docs.removed, p)
		}
	}
	for _, p := range docs.removed {
		if err := ed.Delete(p); err != nil {
			return plumbing.ZeroHash, "", err
		}
	}
	tree, err := ed.Write()
	if err != nil {
		return plumbing.ZeroHash, "", err
	}
	msg := Message(s.cfg.CommitMessage, b, docs)
	subject := Subject(s.cfg.CommitMessage, b.Envelope.Cluster, b.Envelope.Inventory, strconv.Itoa(b.Envelope.ItemCount), export.ShortChecksum(b.Envelope.Checksum))
	if tree == baseTree && !parent.IsZero() {
		return plumbing.ZeroHash, subject, nil
	}
	when := time.Now()
	sig := object.Signature{Name: s.cfg.AuthorName, Email: s.cfg.AuthorEmail, When: when}
	c := &object.Commit{Author: sig, Committer: sig, Message: msg, TreeHash: tree}
	if !parent.IsZero() {
		c.ParentHashes = []plumbing.Hash{parent}
	}
	obj := staging.NewEncodedObject()
	if err := c.Encode(obj); err != nil {
		return plumbing.ZeroHash, "", fmt.Errorf("encoding commit: %w", err)
	}
	h, err := staging.SetEncodedObject(obj)
	if err != nil {
		return plumbing.ZeroHash, "", fmt.Errorf("storing commit: %w", err)
	}
	if err := storePack(store, staging); err != nil {
		return plumbing.ZeroHash, "", err
	}
	for bh := range staging.Blobs {
		stored[bh] = true // a retry on a newer tip reuses them
	}
	return h, subject, nil
}

// putCoverage brings the coverage file to the batch's coverage (removing it when the batch
// carries none) and reports whether that changed the tree.
func putCoverage(ed *treeEditor, staging *memory.Storage, ch *change, stored map[plumbing.Hash]bool) (bool, error) {
	if ch.coverage == nil {
		_, ok, err := ed.Get(ch.coveragePath)
		if err != nil || !ok {
			return false, err
		}
		return true, ed.Delete(ch.coveragePath)
	}
	changed, err := ed.Put(ch.coveragePath, ch.coverageBlob)
	if err != nil || !changed || stored[ch.coverageBlob] {
		return changed, err
	}
	return true, stageBlob(staging, *ch.coverage)
}

// stageBlob stores f's bytes as a blob in the staging storage.
func stageBlob(staging *memory.Storage, f snapshot.File) error {
	obj := staging.NewEncodedObject()
	obj.SetType(plumbing.BlobObject)
	w, err := obj.Writer()
	if err != nil {
		return fmt.Errorf("storing %s: %w", f.Path, err)
	}
	if _, err := w.Write(f.Data); err != nil {
		return fmt.Errorf("storing %s: %w", f.Path, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("storing %s: %w", f.Path, err)
	}
	if _, err := staging.SetEncodedObject(obj); err != nil {
		return fmt.Errorf("storing %s: %w", f.Path, err)
	}
	return nil
}

// storePack moves the staged objects into the mirror as one packfile (loose objects when the
// storage cannot take packs).
func storePack(store storer.EncodedObjectStorer, staging *memory.Storage) error {
	hashes := make([]plumbing.Hash, 0, len(staging.Objects))
	for h := range staging.Objects {
		hashes = append(hashes, h)
	}
	pw, ok := store.(storer.PackfileWriter)
	if !ok {
		for _, o := range staging.Objects {
			if _, err := store.SetEncodedObject(o); err != nil {
				return fmt.Errorf("storing objects: %w", err)
			}
		}
		return nil
	}
	w, err := pw.PackfileWriter()
	if err != nil {
		return fmt.Errorf("opening a pack in the git cache: %w", err)
	}
	if _, err := packfile.NewEncoder(w, staging, false).Encode(hashes, 0); err != nil {
		_ = w.Close()
		return fmt.Errorf("packing %d objects: %w", len(hashes), err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("storing a pack in the git cache: %w", err)
	}
	return nil
}

// Probe lists the remote's branches with the sink's credentials: unreachable remotes are
// transient, refused credentials and missing repositories terminal.
func (s *Sink) Probe(ctx context.Context) error {
	_, err := listRemote(egress.NewContext(ctx, s.env.Guard()), s.cfg.URL, s.mirror.creds)
	return err
}

// Preview shows the destination, sample document paths and the commit subject, without
// touching the remote.
func (s *Sink) Preview(_ context.Context, cluster, inventory string) (sink.Preview, error) {
	return sink.Preview{
		Destination: redact(s.cfg.URL) + " branch " + s.branch,
		Paths:       []string{s.opts.SamplePath(cluster, inventory)},
		Message:     Subject(s.cfg.CommitMessage, cluster, inventory, "<itemCount>", "<checksumShort>"),
	}, nil
}

// Close releases nothing: the mirror stays in the cache directory for the next process.
func (s *Sink) Close() error { return nil }
