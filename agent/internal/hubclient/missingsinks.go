package hubclient

import (
	"context"
	"fmt"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// sinkRef is a sink an inventory's spec names, in the heartbeat's terms.
type sinkRef struct {
	family    kollectv1.SinkFamily
	namespace string
	name      string
}

func (r sinkRef) key() string { return sinkKind(r.family) + "/" + r.namespace + "/" + r.name }

// namedSinks lists the sinks a namespaced inventory's spec names (all in its namespace).
func namedSinks(ns string, s kollectv1.SinkReferences) []sinkRef {
	var out []sinkRef
	for _, f := range []struct {
		family kollectv1.SinkFamily
		refs   []kollectv1.LocalObjectReference
	}{{kollectv1.SinkFamilySnapshot, s.Snapshot}, {kollectv1.SinkFamilyDatabase, s.Database}, {kollectv1.SinkFamilyEvent, s.Event}} {
		for _, r := range f.refs {
			out = append(out, sinkRef{family: f.family, namespace: ns, name: r.Name})
		}
	}
	return out
}

// clusterNamedSinks lists the sinks a cluster inventory's spec names.
func clusterNamedSinks(s kollectv1.ClusterSinkReferences) []sinkRef {
	var out []sinkRef
	for _, f := range []struct {
		family kollectv1.SinkFamily
		refs   []kollectv1.NamespacedObjectReference
	}{{kollectv1.SinkFamilySnapshot, s.Snapshot}, {kollectv1.SinkFamilyDatabase, s.Database}, {kollectv1.SinkFamilyEvent, s.Event}} {
		for _, r := range f.refs {
			out = append(out, sinkRef{family: f.family, namespace: r.Namespace, name: r.Name})
		}
	}
	return out
}

// missingSinks finds the sinks inventories name that do not exist. The agent binds no such
// sink, so an inventory's status has no entry for it (only its Degraded condition says
// SinkInvalid), and a heartbeat built from the entries alone left it out: the hub's
// freshness matrix showed nothing where an export was expected. Each one becomes a sink of
// the heartbeat with not_found set and a terminal error naming the inventories.
type missingSinks struct {
	c       client.Reader
	checked map[string]bool // key → the sink exists (or its existence could not be read)
	missing map[string]*fleetv1.SinkStatus
	by      map[string][]string // key → inventories naming it
}

func newMissingSinks(c client.Reader) *missingSinks {
	return &missingSinks{c: c, checked: map[string]bool{}, missing: map[string]*fleetv1.SinkStatus{}, by: map[string][]string{}}
}

// check records the refs of inventory (namespace/name) that its status does not report and
// whose sink is not found. A read that fails otherwise (the cache not synced, a namespace the
// agent does not watch) proves nothing, and reports nothing.
func (m *missingSinks) check(ctx context.Context, inventory string, refs []sinkRef, reported map[string]bool) {
	for _, r := range refs {
		key := r.key()
		if reported[key] {
			continue
		}
		exists, seen := m.checked[key]
		if !seen {
			_, err := sinkObject(ctx, m.c, r.family, r.namespace, r.name)
			exists = !apierrors.IsNotFound(err)
			m.checked[key] = exists
		}
		if exists {
			continue
		}
		if m.missing[key] == nil {
			m.missing[key] = &fleetv1.SinkStatus{Kind: sinkKind(r.family), Namespace: r.namespace, Name: r.name, NotFound: true,
				ErrorClass: fleetv1.SinkErrorClass_SINK_ERROR_CLASS_TERMINAL}
		}
		m.by[key] = append(m.by[key], inventory)
	}
}

// add merges the missing sinks into sinks, keyed as collectStatus keys them.
func (m *missingSinks) add(sinks map[string]*fleetv1.SinkStatus) {
	for key, s := range m.missing {
		names := m.by[key]
		sort.Strings(names)
		s.LastError = fmt.Sprintf("sink not found: no %s %s/%s in this cluster, named by inventory %s", s.Kind, s.Namespace, s.Name,
			strings.Join(names, ", "))
		// Reported by another inventory from before the sink was deleted: it is gone all the same.
		if cur := sinks[key]; cur != nil {
			cur.NotFound, cur.LastError, cur.ErrorClass = true, s.LastError, s.ErrorClass
			continue
		}
		sinks[key] = s
	}
}

// sinkObject reads a sink of a family.
func sinkObject(ctx context.Context, c client.Reader, f kollectv1.SinkFamily, ns, name string) (client.Object, error) {
	key := client.ObjectKey{Namespace: ns, Name: name}
	var obj client.Object
	switch f {
	case kollectv1.SinkFamilySnapshot:
		obj = &kollectv1.KollectSnapshotSink{}
	case kollectv1.SinkFamilyDatabase:
		obj = &kollectv1.KollectDatabaseSink{}
	default:
		obj = &kollectv1.KollectEventSink{}
	}
	if err := c.Get(ctx, key, obj); err != nil {
		return nil, fmt.Errorf("reading %s %s: %w", sinkKind(f), key, err)
	}
	return obj, nil
}
