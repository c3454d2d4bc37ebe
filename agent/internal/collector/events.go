package collector

import (
	"context"
	"slices"
	"strings"
)

// changed tells the watch's subscribers that objects changed, coalesced: at most one call of
// onEvent runs and at most one more is pending, whatever the rate of events.
//
// Why: every subscriber call wakes every inventory with a target of the kind, and each looks
// its targets up (Manager.kindChanged). Called once per object, a list of 100,000 ConfigMaps
// with 100 tenants made ten million such lookups before anything could be exported. Events
// before the watch has synced are not delivered at all: no inventory builds from a watch
// still listing, and the watch's sync notifies them (start's onSynced), after every object of
// the list is in the store and has been handed to the handlers.
func (w *gvkWatch) changed() {
	if !w.synced.Load() {
		return
	}
	select {
	case w.kick <- struct{}{}:
	default: // a call is pending already; it reads the store after this event
	}
}

// deliver runs onEvent for every coalesced kick until ctx ends.
func (w *gvkWatch) deliver(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
			w.onEvent()
		}
	}
}

// namespaceIndex indexes a watch's items by namespace, so that collecting a target that names
// its namespaces reads only their items.
//
// Why: a kind's watch holds the objects of every target of the kind, and an inventory
// collects each of its targets at every build. With 100 tenants, each target selecting its
// own namespace of a cluster-wide watch, walking every item made each build read 100 times
// the objects it selects (and a target's status report twice more). The index costs a map
// entry per object.
const namespaceIndex = "namespace"

func itemNamespace(obj any) ([]string, error) {
	if it, ok := obj.(*item); ok {
		return []string{it.namespace}, nil
	}
	return nil, nil
}

// plainNamespaces returns the namespaces a target selects among, when it names them without
// patterns (a KollectTarget without a selection names its own); ok is false when the target
// may select in any namespace.
func (t *Target) plainNamespaces() (ns []string, ok bool) {
	if !t.Namespaced || len(t.includeNS) == 0 {
		return nil, false
	}
	for _, p := range t.includeNS {
		if hasGlob(p) || strings.ContainsRune(p, '\\') {
			return nil, false
		}
	}
	ns = slices.Clone(t.includeNS)
	slices.Sort(ns)
	return slices.Compact(ns), true
}

// itemsFor returns the items that a target may select: those of its namespaces when it names
// them, every item otherwise. Selection is still applied to each (Collect).
func (w *gvkWatch) itemsFor(t *Target) []*item {
	nss, ok := t.plainNamespaces()
	if !ok {
		return w.items()
	}
	var out []*item
	for _, inf := range w.informers {
		idx := inf.GetIndexer()
		for _, ns := range nss {
			objs, err := idx.ByIndex(namespaceIndex, ns)
			if err != nil {
				return w.items() // the index is missing: cannot happen, but never collect less
			}
			for _, o := range objs {
				if it, ok := o.(*item); ok {
					out = append(out, it)
				}
			}
		}
	}
	return out
}
