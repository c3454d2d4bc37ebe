package gitrepo

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/memory"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/snapshot"
)

// One writer per (cluster, inventory) on a branch, by the rules of sink.WriterCheck. Each
// inventory has a writer file beside its coverage file (east/workloads.writer.json next to
// east/workloads.coverage.json) naming the agent that last committed a change of it and when.
// Before every push attempt the sink reads that file in the tip it builds on: another
// instance that wrote within the conflict window refuses the export, and nothing is
// committed to the branch. Pushes are never forced, so the read and the push are one
// compare-and-swap: a holder that pushed in between moves the tip, the push is rejected and
// the next attempt reads the holder's file again.
//
// A file in the tree rather than the last commit touching the inventory's subtree: mirrors
// are shallow (repo.go), so that commit is usually not in the mirror, and finding it would
// walk the history of a branch 500 clusters commit to. The tip's tree always holds the file,
// one blob away. The file changes only in commits that change the inventory's documents or
// coverage, so it never makes a commit of its own: static data, restarts and upgrades still
// commit nothing. The price is that git records a write only when data changes (git keeps no
// confirmation): a holder whose inventory has not changed for the window is taken for gone,
// and a second agent takes over; the first is refused at its next change, and its contender
// mark (contender.go) makes the second report the conflict at its next commit.

// writerSuffix ends the name of an inventory's writer file, which sits where its coverage
// file does (snapshot.Options.CoveragePath).
const (
	writerSuffix   = ".writer.json"
	coverageSuffix = ".coverage.json"
)

// writerPath is the writer file of cluster's inventory.
func writerPath(o snapshot.Options, cluster, inventory string) string {
	return strings.TrimSuffix(o.CoveragePath(cluster, inventory), coverageSuffix) + writerSuffix
}

// maxWriterFile bounds what is read of a writer file (a few hundred bytes when the sink wrote
// it).
const maxWriterFile = 64 << 10

// writerRecord is the content of a writer file.
type writerRecord struct {
	SchemaVersion string        `json:"schemaVersion"`
	Cluster       string        `json:"cluster"`
	Inventory     string        `json:"inventory"`
	Writer        export.Writer `json:"writer"`
	// WrittenAt is the export time (the batch's exportedAt) of the writer's last commit.
	WrittenAt time.Time `json:"writtenAt"`
}

// writerFile renders the record naming the batch's writer; ok is false when the batch names
// no instance (tests, agents from before writers were recorded): such a writer never
// conflicts and leaves the file as it is.
func writerFile(o snapshot.Options, e *export.Envelope) (f snapshot.File, ok bool) {
	if e.Writer.Instance == "" {
		return snapshot.File{}, false
	}
	at := e.ExportedAt
	if at.IsZero() {
		at = time.Now()
	}
	data, err := json.Marshal(writerRecord{SchemaVersion: export.SchemaVersion, Cluster: e.Cluster, Inventory: e.Inventory,
		Writer: e.Writer, WrittenAt: at.UTC()})
	if err != nil {
		return snapshot.File{}, false // strings and a time always encode
	}
	return snapshot.File{Path: writerPath(o, e.Cluster, e.Inventory), Data: append(data, '\n')}, true
}

// readWriter reads the writer file at path in commit's tree; nil when the commit is zero or
// holds no such file. A file that does not parse (edited by hand) names nobody, as a missing
// one does: the next commit of the inventory rewrites it.
func readWriter(store storer.EncodedObjectStorer, commit plumbing.Hash, path string) (*writerRecord, error) {
	if commit.IsZero() {
		return nil, nil
	}
	c, err := object.GetCommit(store, commit)
	if err != nil {
		return nil, fmt.Errorf("reading commit %s: %w", commit, err)
	}
	// The tree editor, not Tree.File: File reports a tree it cannot read as a missing file,
	// which would let a broken mirror name nobody.
	blob, ok, err := newTreeEditor(store, nil, c.TreeHash).Get(path)
	if err != nil || !ok {
		return nil, err
	}
	b, err := object.GetBlob(store, blob)
	if err != nil {
		return nil, fmt.Errorf("reading %s in %s: %w", path, commit, err)
	}
	r, err := b.Reader()
	if err != nil {
		return nil, fmt.Errorf("reading %s in %s: %w", path, commit, err)
	}
	defer r.Close()
	raw, err := io.ReadAll(io.LimitReader(r, maxWriterFile))
	if err != nil {
		return nil, fmt.Errorf("reading %s in %s: %w", path, commit, err)
	}
	var rec writerRecord
	if json.Unmarshal(raw, &rec) != nil {
		return nil, nil
	}
	return &rec, nil
}

// writerCheck is the sink.WriterCheck of the batch against the holder the tip names and the
// contender mark read beside it (either may be nil).
func writerCheck(b *sink.Batch, holder *writerRecord, mark *contenderMark) sink.WriterCheck {
	e := &b.Envelope
	now := e.ExportedAt
	if now.IsZero() {
		now = time.Now()
	}
	c := sink.WriterCheck{Cluster: e.Cluster, Inventory: e.Inventory, Self: e.Writer, Now: now, Window: b.ConflictWindow}
	if holder != nil {
		c.Holder, c.HolderLastWrite = holder.Writer, holder.WrittenAt
	}
	if mark != nil {
		c.Contender, c.ContendedAt = mark.Contender, mark.At
	}
	return c
}

// putWriter names the batch's writer in the writer file when the commit changes the
// inventory (changed), and removes the file when the export leaves the inventory nothing (no
// document, no coverage: a deleted inventory leaves no file behind).
func putWriter(ed *treeEditor, staging *memory.Storage, ch *change, changed bool) error {
	if !changed {
		return nil
	}
	if ch.empty {
		return ed.Delete(ch.writerPath)
	}
	if ch.writer == nil {
		return nil
	}
	blob := plumbing.ComputeHash(plumbing.BlobObject, ch.writer.Data)
	put, err := ed.Put(ch.writerPath, blob)
	if err != nil || !put {
		return err
	}
	return stageBlob(staging, blob, ch.writer.Data)
}
