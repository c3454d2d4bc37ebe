package gitrepo

import (
	"errors"
	"fmt"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// Every shallow fetch adds the commit it fetched to the mirror's shallow list (go-git only
// appends), so a mirror that fetched after each of a year's exports would list hundreds of
// thousands of commits, each sent to the server with every fetch and walked by every push. Only
// the boundaries of what the mirror's refs reach matter (they tell the server which history
// the mirror lacks); the others are dropped once the list outgrows maxShallow.
const (
	maxShallow = 16
	// maxShallowWalk bounds the commits walked to find the boundaries still reached: a mirror
	// cloned in full by an earlier version has long histories, and then keeps its list.
	maxShallowWalk = 1000
)

// pruneShallow keeps, of the shallow list, the commits the mirror's refs still reach.
func (m *mirror) pruneShallow() error {
	store := m.repo.Storer
	shallow, err := store.Shallow()
	if err != nil || len(shallow) <= maxShallow {
		return err
	}
	boundary := make(map[plumbing.Hash]bool, len(shallow))
	for _, h := range shallow {
		boundary[h] = true
	}
	reached, ok, err := m.reachedBoundaries(boundary)
	if err != nil || !ok {
		return err
	}
	keep := make([]plumbing.Hash, 0, len(reached))
	for _, h := range shallow {
		if reached[h] {
			keep = append(keep, h)
		}
	}
	if err := store.SetShallow(keep); err != nil {
		return fmt.Errorf("rewriting the git cache's shallow list: %w", err)
	}
	return nil
}

// reachedBoundaries walks from every ref of the mirror down to the shallow boundaries and
// returns those it reached; ok is false when the walk outgrew maxShallowWalk.
func (m *mirror) reachedBoundaries(boundary map[plumbing.Hash]bool) (map[plumbing.Hash]bool, bool, error) {
	refs, err := m.repo.Storer.IterReferences()
	if err != nil {
		return nil, false, fmt.Errorf("listing the git cache's refs: %w", err)
	}
	var todo []plumbing.Hash
	err = refs.ForEach(func(r *plumbing.Reference) error {
		if r.Type() == plumbing.HashReference {
			todo = append(todo, r.Hash())
		}
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("listing the git cache's refs: %w", err)
	}
	reached, seen := map[plumbing.Hash]bool{}, map[plumbing.Hash]bool{}
	for len(todo) > 0 {
		h := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if seen[h] {
			continue
		}
		if seen[h] = true; len(seen) > maxShallowWalk {
			return nil, false, nil
		}
		if boundary[h] {
			reached[h] = true
			continue // its parents are not in the mirror
		}
		c, err := object.GetCommit(m.repo.Storer, h)
		switch {
		case errors.Is(err, plumbing.ErrObjectNotFound), errors.Is(err, object.ErrUnsupportedObject):
			continue // a commit the mirror lacks, or a ref to something else
		case err != nil:
			return nil, false, fmt.Errorf("reading commit %s: %w", h, err)
		}
		todo = append(todo, c.ParentHashes...)
	}
	return reached, true, nil
}
