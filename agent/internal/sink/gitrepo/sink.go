package gitrepo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/egress"
	"kollect.dev/agent/internal/sink/snapshot"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

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
	e := &b.Envelope
	p := &publication{b: b, branch: branch, base: base,
		key:     branch + "\x00" + e.Cluster + "\x00" + e.Inventory,
		want:    held{e.Checksum, export.CoverageDigest(e.Coverage)},
		subject: Subject(s.cfg.CommitMessage, e.Cluster, e.Inventory, strconv.Itoa(e.ItemCount), export.ShortChecksum(e.Checksum)),
		writer:  writerPath(s.opts, e.Cluster, e.Inventory)}
	if !b.Resync && s.published[p.key] == p.want {
		return Result{Subject: p.subject}, nil
	}
	// The diff applies when the branch holds its starting point, whatever coverage it holds:
	// a coverage-only batch has an empty diff and renders no document.
	p.incremental = !b.Resync && !b.Diff.Full && b.PreviousChecksum != "" && s.published[p.key].checksum == b.PreviousChecksum
	if ref, ok := markRef(e.Cluster, e.Inventory); ok && e.Writer.Instance != "" {
		p.mark = ref // a writer without an instance never conflicts: no mark to read
	}
	var r rounds
	for {
		r.begin()
		res, err := s.round(ctx, p, &r)
		res.Attempts = r.n
		if !errors.Is(err, errConflict) {
			return res, err
		}
		s.env.Log.V(1).Info("push rejected, re-applying on the new tip", "branch", branch, "attempt", r.n, "reason", err.Error())
		if stop := r.retry(ctx, err); stop != nil {
			return res, sink.TransientError(fmt.Errorf("pushing to %s %s: %w: %w", redact(s.cfg.URL), branch, stop, err))
		}
	}
}

// publication is one export's state across its rounds.
type publication struct {
	b            *sink.Batch
	branch, base string
	key          string
	want         held
	subject      string
	writer       string                 // the inventory's writer file
	mark         plumbing.ReferenceName // its contender mark, "" for a writer without an instance
	incremental  bool
	// ch is the rendered export. A round drops it once its documents are packed (a full
	// render of 100k rows is tens of megabytes, and the push that follows needs memory of
	// its own); a lost round renders again.
	ch *change
}

// round is one fetch-check-rebuild-push round; errConflict means another agent pushed first.
func (s *Sink) round(ctx context.Context, p *publication, r *rounds) (Result, error) {
	refs := []plumbing.ReferenceName{plumbing.NewBranchReferenceName(p.branch)}
	if p.base != "" && p.base != p.branch {
		refs = append(refs, plumbing.NewBranchReferenceName(p.base))
	}
	if p.mark != "" {
		refs = append(refs, p.mark)
	}
	tips, err := s.mirror.fetch(ctx, refs...)
	if err != nil {
		return Result{}, err
	}
	parent, exists := tips[refs[0]]
	if !exists && p.base != "" {
		parent = tips[plumbing.NewBranchReferenceName(p.base)]
	}
	check, err := s.writerCheck(p.b, parent, tips[p.mark], p.writer)
	if err != nil {
		return Result{}, err
	}
	if refusal := check.Refusal(); refusal != nil {
		s.markContender(ctx, check, p.mark, tips[p.mark])
		return Result{Subject: p.subject}, refusal
	}
	if err := r.on(parent); err != nil {
		return Result{}, sink.TransientError(fmt.Errorf("pushing to %s %s: %w", redact(s.cfg.URL), p.branch, err))
	}
	if !exists && p.incremental {
		// The branch is gone (a merged merge-request branch, deleted): what we put there
		// is not known to be on the base, so render everything.
		p.incremental, p.ch = false, nil
	}
	if p.ch == nil {
		if p.ch, err = s.change(p.b, p.incremental); err != nil {
			return Result{}, err
		}
	}
	commit, staging, subject, err := s.commit(p.b, p.ch, parent)
	if err != nil {
		return Result{}, err
	}
	if commit.IsZero() {
		s.published[p.key] = p.want
		return Result{Subject: subject}, check.Contention()
	}
	pack, err := writePack(filepath.Dir(s.mirror.dir), staging)
	if err != nil {
		return Result{}, err
	}
	defer os.Remove(pack)
	p.ch = nil // the documents are in the pack now
	old := parent
	if !exists {
		old = plumbing.ZeroHash // a new branch, started from base
	}
	if err := s.mirror.push(ctx, p.branch, old, commit, pack); err != nil {
		return Result{}, err
	}
	s.published[p.key] = p.want
	s.noteTakeover(check)
	s.env.Log.V(1).Info("pushed", "branch", p.branch, "commit", commit.String(), "attempts", r.n)
	return Result{Commit: commit, Subject: subject}, check.Contention()
}

// writerCheck reads the holder the parent's writer file names and the contender mark at
// markTip (zero: none), for the batch's writer.
func (s *Sink) writerCheck(b *sink.Batch, parent, markTip plumbing.Hash, path string) (sink.WriterCheck, error) {
	if b.Envelope.Writer.Instance == "" {
		return sink.WriterCheck{Self: b.Envelope.Writer}, nil // never conflicts: nothing to read
	}
	holder, err := readWriter(s.mirror.repo.Storer, parent, path)
	if err != nil {
		return sink.WriterCheck{}, err
	}
	var mark *contenderMark
	if !markTip.IsZero() {
		if mark, err = s.mirror.readMark(markTip, b.Envelope.Cluster, b.Envelope.Inventory); err != nil {
			return sink.WriterCheck{}, err
		}
	}
	return writerCheck(b, holder, mark), nil
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

	// writerPath is the inventory's writer file, writer its new content (nil when the batch
	// names no writer instance); empty tells that the export leaves the inventory no
	// document and no coverage, which removes the file.
	writerPath string
	writer     *snapshot.File
	empty      bool
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
	ch.writerPath = writerPath(s.opts, b.Envelope.Cluster, b.Envelope.Inventory)
	for i, f := range ch.files {
		// Only a template that spells the coverage or writer file's name gets here.
		if f.Path == ch.coveragePath {
			return nil, sink.Terminalf("layout pathTemplate %q puts a document at %s, the inventory's coverage file", s.opts.Template, f.Path)
		}
		if f.Path == ch.writerPath {
			return nil, sink.Terminalf("layout pathTemplate %q puts a document at %s, the inventory's writer file", s.opts.Template, f.Path)
		}
		ch.blobs[i] = plumbing.ComputeHash(plumbing.BlobObject, f.Data)
	}
	if f, ok := s.opts.CoverageFile(&b.Envelope); ok {
		ch.coverage, ch.coverageBlob = &f, plumbing.ComputeHash(plumbing.BlobObject, f.Data)
	}
	if f, ok := writerFile(s.opts, &b.Envelope); ok {
		ch.writer = &f
	}
	ch.empty = len(b.Envelope.Rows) == 0 && ch.coverage == nil
	return ch, nil
}

// commit applies the rendered documents to parent's tree and stages a commit, with the objects
// new to the remote, when the tree changed; it returns the zero hash when parent already holds
// the export. Nothing is stored in the mirror: push does, once the remote took the commit.
func (s *Sink) commit(b *sink.Batch, ch *change, parent plumbing.Hash) (plumbing.Hash, *memory.Storage, string, error) {
	store := s.mirror.repo.Storer
	var baseTree plumbing.Hash
	if !parent.IsZero() {
		c, err := object.GetCommit(store, parent)
		if err != nil {
			return plumbing.ZeroHash, nil, "", fmt.Errorf("reading commit %s: %w", parent, err)
		}
		baseTree = c.TreeHash
	}
	// New objects are staged in memory (documents by reference, pack.go) and packed once.
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
			return plumbing.ZeroHash, nil, "", err
		}
		changed, err := ed.Put(f.Path, blobs[i])
		if err != nil {
			return plumbing.ZeroHash, nil, "", err
		}
		if !changed {
			continue
		}
		if existed {
			docs.changed = append(docs.changed, f.Path)
		} else {
			docs.added = append(docs.added, f.Path)
		}
		if err := stageBlob(staging, blobs[i], f.Data); err != nil {
			return plumbing.ZeroHash, nil, "", err
		}
	}
	if docs.coverage, err = putCoverage(ed, staging, ch); err != nil {
		return plumbing.ZeroHash, nil, "", err
	}
	if m := ch.prune; m != nil {
		// Prune: documents of this cluster and inventory that the export no longer holds.
		err := ed.Walk(m.Prefix, func(path string, _ plumbing.Hash) {
			if !keep[path] && path != ch.writerPath && m.Match(path) {
				docs.removed = append(docs.removed, path)
			}
		})
		if err != nil {
			return plumbing.ZeroHash, nil, "", err
		}
	}
	for _, p := range ch.remove {
		if _, ok, err := ed.Get(p); err != nil {
			return plumbing.ZeroHash, nil, "", err
		} else if ok {
			docs.removed = append(docs.removed, p)
		}
	}
	for _, p := range docs.removed {
		if err := ed.Delete(p); err != nil {
			return plumbing.ZeroHash, nil, "", err
		}
	}
	changed := parent.IsZero() || docs.coverage || len(docs.added)+len(docs.changed)+len(docs.removed) > 0
	if err := putWriter(ed, staging, ch, changed); err != nil {
		return plumbing.ZeroHash, nil, "", err
	}
	tree, err := ed.Write()
	if err != nil {
		return plumbing.ZeroHash, nil, "", err
	}
	msg := Message(s.cfg.CommitMessage, b, docs)
	subject := Subject(s.cfg.CommitMessage, b.Envelope.Cluster, b.Envelope.Inventory, strconv.Itoa(b.Envelope.ItemCount), export.ShortChecksum(b.Envelope.Checksum))
	if tree == baseTree && !parent.IsZero() {
		return plumbing.ZeroHash, nil, subject, nil
	}
	when := time.Now()
	sig := object.Signature{Name: s.cfg.AuthorName, Email: s.cfg.AuthorEmail, When: when}
	c := &object.Commit{Author: sig, Committer: sig, Message: msg, TreeHash: tree}
	if !parent.IsZero() {
		c.ParentHashes = []plumbing.Hash{parent}
	}
	obj := staging.NewEncodedObject()
	if err := c.Encode(obj); err != nil {
		return plumbing.ZeroHash, nil, "", fmt.Errorf("encoding commit: %w", err)
	}
	h, err := staging.SetEncodedObject(obj)
	if err != nil {
		return plumbing.ZeroHash, nil, "", fmt.Errorf("storing commit: %w", err)
	}
	return h, staging, subject, nil
}

// putCoverage brings the coverage file to the batch's coverage (removing it when the batch
// carries none) and reports whether that changed the tree.
func putCoverage(ed *treeEditor, staging *memory.Storage, ch *change) (bool, error) {
	if ch.coverage == nil {
		_, ok, err := ed.Get(ch.coveragePath)
		if err != nil || !ok {
			return false, err
		}
		return true, ed.Delete(ch.coveragePath)
	}
	changed, err := ed.Put(ch.coveragePath, ch.coverageBlob)
	if err != nil || !changed {
		return changed, err
	}
	return true, stageBlob(staging, ch.coverageBlob, ch.coverage.Data)
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
