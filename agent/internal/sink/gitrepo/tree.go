package gitrepo

import (
	"fmt"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// treeEditor edits a git tree in memory, loading only the subtrees a path touches, and writes
// back only the trees it changed.
type treeEditor struct {
	store storer.EncodedObjectStorer // reads existing trees
	out   storer.EncodedObjectStorer // receives new trees
	root  *treeNode
}

type treeNode struct {
	hash    plumbing.Hash // stored tree, zero for a new one
	entries map[string]*treeEntry
	dirty   bool
}

type treeEntry struct {
	mode filemode.FileMode
	hash plumbing.Hash
	sub  *treeNode // loaded subtree of a directory entry
}

func newTreeEditor(store, out storer.EncodedObjectStorer, root plumbing.Hash) *treeEditor {
	return &treeEditor{store: store, out: out, root: &treeNode{hash: root}}
}

func (e *treeEditor) load(n *treeNode) error {
	if n.entries != nil {
		return nil
	}
	n.entries = map[string]*treeEntry{}
	if n.hash.IsZero() {
		return nil
	}
	t, err := object.GetTree(e.store, n.hash)
	if err != nil {
		return fmt.Errorf("reading tree %s: %w", n.hash, err)
	}
	for _, te := range t.Entries {
		n.entries[te.Name] = &treeEntry{mode: te.Mode, hash: te.Hash}
	}
	return nil
}

// dir returns the subtree at the directory path parts, creating it when create is set (a
// file in the way is replaced). It returns nil when the directory does not exist.
func (e *treeEditor) dir(parts []string, create bool) (*treeNode, error) {
	n := e.root
	for _, name := range parts {
		if err := e.load(n); err != nil {
			return nil, err
		}
		ent, ok := n.entries[name]
		if !ok || ent.mode != filemode.Dir {
			if !create {
				return nil, nil
			}
			ent = &treeEntry{mode: filemode.Dir, sub: &treeNode{entries: map[string]*treeEntry{}, dirty: true}}
			n.entries[name] = ent
			n.dirty = true
		}
		if ent.sub == nil {
			ent.sub = &treeNode{hash: ent.hash}
		}
		n = ent.sub
	}
	return n, e.load(n)
}

func split(path string) (dirs []string, file string) {
	parts := strings.Split(path, "/")
	return parts[:len(parts)-1], parts[len(parts)-1]
}

// Get returns the blob hash at path.
func (e *treeEditor) Get(path string) (plumbing.Hash, bool, error) {
	dirs, file := split(path)
	n, err := e.dir(dirs, false)
	if err != nil || n == nil {
		return plumbing.ZeroHash, false, err
	}
	ent, ok := n.entries[file]
	if !ok || ent.mode == filemode.Dir {
		return plumbing.ZeroHash, false, nil
	}
	return ent.hash, true, nil
}

// Put sets path to the blob hash; it reports whether anything changed.
func (e *treeEditor) Put(path string, blob plumbing.Hash) (bool, error) {
	dirs, file := split(path)
	n, err := e.dir(dirs, true)
	if err != nil {
		return false, err
	}
	if ent, ok := n.entries[file]; ok && ent.mode == filemode.Regular && ent.hash == blob {
		return false, nil
	}
	n.entries[file] = &treeEntry{mode: filemode.Regular, hash: blob}
	e.markDirty(dirs)
	return true, nil
}

// Delete removes the file at path, if present.
func (e *treeEditor) Delete(path string) error {
	dirs, file := split(path)
	n, err := e.dir(dirs, false)
	if err != nil || n == nil {
		return err
	}
	if _, ok := n.entries[file]; ok {
		delete(n.entries, file)
		e.markDirty(dirs)
	}
	return nil
}

func (e *treeEditor) markDirty(dirs []string) {
	n := e.root
	n.dirty = true
	for _, name := range dirs {
		n = n.entries[name].sub
		n.dirty = true
	}
}

// Walk calls fn for every file under the directory prefix ("" for the whole tree, or ending
// in "/"); a prefix naming a file visits just that file.
func (e *treeEditor) Walk(prefix string, fn func(path string, blob plumbing.Hash)) error {
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		if h, ok, err := e.Get(prefix); err != nil || !ok {
			return err
		} else {
			fn(prefix, h)
		}
		return nil
	}
	var dirs []string
	if prefix != "" {
		dirs = strings.Split(strings.TrimSuffix(prefix, "/"), "/")
	}
	n, err := e.dir(dirs, false)
	if err != nil || n == nil {
		return err
	}
	return e.walk(n, prefix, fn)
}

func (e *treeEditor) walk(n *treeNode, prefix string, fn func(string, plumbing.Hash)) error {
	for name, ent := range n.entries {
		if ent.mode != filemode.Dir {
			fn(prefix+name, ent.hash)
			continue
		}
		if ent.sub == nil {
			ent.sub = &treeNode{hash: ent.hash}
		}
		if err := e.load(ent.sub); err != nil {
			return err
		}
		if err := e.walk(ent.sub, prefix+name+"/", fn); err != nil {
			return err
		}
	}
	return nil
}

// Write stores every changed tree and returns the root tree's hash.
func (e *treeEditor) Write() (plumbing.Hash, error) {
	if err := e.load(e.root); err != nil {
		return plumbing.ZeroHash, err
	}
	h, _, err := e.write(e.root)
	return h, err
}

// write returns the node's hash and whether it is empty (empty directories vanish, as in git).
func (e *treeEditor) write(n *treeNode) (plumbing.Hash, bool, error) {
	if !n.dirty {
		return n.hash, false, nil
	}
	t := &object.Tree{}
	for name, ent := range n.entries {
		if ent.sub != nil && ent.sub.dirty {
			h, empty, err := e.write(ent.sub)
			if err != nil {
				return plumbing.ZeroHash, false, err
			}
			if empty {
				continue
			}
			ent.hash = h
		}
		t.Entries = append(t.Entries, object.TreeEntry{Name: name, Mode: ent.mode, Hash: ent.hash})
	}
	// Git orders entries by name, comparing a directory as if its name ended in "/".
	sortKey := func(te object.TreeEntry) string {
		if te.Mode == filemode.Dir {
			return te.Name + "/"
		}
		return te.Name
	}
	sort.Slice(t.Entries, func(i, j int) bool { return sortKey(t.Entries[i]) < sortKey(t.Entries[j]) })
	obj := e.out.NewEncodedObject()
	if err := t.Encode(obj); err != nil {
		return plumbing.ZeroHash, false, fmt.Errorf("encoding tree: %w", err)
	}
	h, err := e.out.SetEncodedObject(obj)
	if err != nil {
		return plumbing.ZeroHash, false, fmt.Errorf("storing tree: %w", err)
	}
	n.hash, n.dirty = h, false
	return h, len(t.Entries) == 0, nil
}
