package controller

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/inventory"
	"kollect.dev/agent/internal/scope"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/egress"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// sinkObject is the part of a sink object the agent needs generically.
type sinkObject struct {
	obj     client.Object
	typ     string
	timeout time.Duration
	status  *kollectv1.SinkStatus
}

func newSinkObject(family kollectv1.SinkFamily) client.Object {
	switch family {
	case kollectv1.SinkFamilySnapshot:
		return &kollectv1.KollectSnapshotSink{}
	case kollectv1.SinkFamilyDatabase:
		return &kollectv1.KollectDatabaseSink{}
	default:
		return &kollectv1.KollectEventSink{}
	}
}

func asSinkObject(obj client.Object) sinkObject {
	switch s := obj.(type) {
	case *kollectv1.KollectSnapshotSink:
		return sinkObject{obj: s, typ: sink.Key(kollectv1.SinkFamilySnapshot, string(s.Spec.Type)), timeout: s.Spec.Timeout.Duration, status: &s.Status}
	case *kollectv1.KollectDatabaseSink:
		return sinkObject{obj: s, typ: sink.Key(kollectv1.SinkFamilyDatabase, string(s.Spec.Type)), timeout: s.Spec.Timeout.Duration, status: &s.Status}
	case *kollectv1.KollectEventSink:
		return sinkObject{obj: s, typ: sink.Key(kollectv1.SinkFamilyEvent, string(s.Spec.Type)), timeout: s.Spec.Timeout.Duration, status: &s.Status}
	}
	panic(fmt.Sprintf("not a sink: %T", obj))
}

// SinkBuilder builds sinks with Secrets read through an uncached reader, so the agent needs
// Secret read only in namespaces that hold sinks and never watches Secrets cluster-wide.
type SinkBuilder struct {
	factories sink.Factories
	reader    client.Reader
	cluster   string
	cacheDir  string
	// egress guards every connection of every sink the builder makes.
	egress *egress.Guard
	// scopes grant what only a KollectClusterScope may: ambient credentials, skipped
	// certificate verification. Nil grants neither.
	scopes *ScopeGate
	log    logr.Logger
}

// build makes a sink instance for one consumer (an inventory, or the probe). Each consumer
// gets its own working directory: two instances sharing a git clone would corrupt it.
func (b *SinkBuilder) build(ctx context.Context, so sinkObject, consumer string) (sink.Sink, error) {
	s, _, err := b.buildWatched(ctx, so, consumer)
	return s, err
}

// buildWatched is build that also returns the Secrets the sink reads, with their versions, so
// that a rotated credential rebuilds it (see secretReads.rotated).
func (b *SinkBuilder) buildWatched(ctx context.Context, so sinkObject, consumer string) (sink.Sink, *secretReads, error) {
	f, ok := b.factories[so.typ]
	if !ok {
		return nil, nil, sink.TerminalError(fmt.Errorf("%w: %s is not built into this agent", errUnsupported, so.typ))
	}
	policy, err := b.policy(ctx, so.obj)
	if err != nil {
		return nil, nil, err
	}
	reads := &secretReads{reader: b.reader, namespace: so.obj.GetNamespace(), versions: map[string]string{}}
	ns, name := so.obj.GetNamespace(), so.obj.GetName()
	// A bundle's author is not the cluster's admin: what a sink the hub delivered may read
	// is what the admin labelled for it (see kollectv1.LabelHubSinks).
	hubDelivered := so.obj.GetLabels()[kollectv1.LabelManagedBy] == kollectv1.ManagedByHub
	env := sink.Env{
		Cluster: b.cluster, Namespace: ns, Name: name,
		CacheDir: filepath.Join(b.cacheDir, so.typ, ns, name, strings.ReplaceAll(consumer, "/", "_")),
		Log:      b.log.WithValues("sink", so.typ+"/"+ns+"/"+name),
		Egress:   policy.guard,
		Secrets: func(ctx context.Context, secret string) (map[string][]byte, error) {
			s := &corev1.Secret{}
			if err := b.reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: secret}, s); err != nil {
				return nil, fmt.Errorf("reading Secret %s/%s: %w", ns, secret, err)
			}
			if hubDelivered && s.Labels[kollectv1.LabelHubSinks] != kollectv1.HubSinksAllowed {
				return nil, sink.TerminalError(scope.Decision{Reason: kollectv1.ReasonHubSecretDenied, Message: fmt.Sprintf(
					"the hub delivered this sink, and Secret %s/%s is not labelled %s=%s: a hub-delivered sink reads only the Secrets the cluster admin labelled for it",
					ns, secret, kollectv1.LabelHubSinks, kollectv1.HubSinksAllowed)}.Err())
			}
			reads.record(secret, s.ResourceVersion)
			return s.Data, nil
		},
	}
	s, err := f(ctx, so.obj, env)
	if err != nil {
		return nil, nil, fmt.Errorf("configuring %s sink %s/%s: %w", so.typ, ns, name, err)
	}
	return s, reads, nil
}

// secretReads records the resourceVersion of each Secret a sink read. The agent does not
// watch Secrets (that would need reading every Secret of the cluster); it asks for the few a
// built sink uses, at most every secretRecheck, and rebuilds the sink when one changed.
type secretReads struct {
	reader    client.Reader
	namespace string

	mu        sync.Mutex
	versions  map[string]string
	checkedAt time.Time
}

// secretRecheck bounds how often a built sink's Secrets are read again.
const secretRecheck = 10 * time.Second

func (r *secretReads) record(name, version string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.versions[name] = version
}

// rotated reports whether a Secret the sink read has changed (or gone) since. It reads them
// at most every secretRecheck; in between it answers false.
func (r *secretReads) rotated(ctx context.Context, now time.Time) bool {
	r.mu.Lock()
	if now.Sub(r.checkedAt) < secretRecheck {
		r.mu.Unlock()
		return false
	}
	r.checkedAt = now
	versions := maps.Clone(r.versions)
	r.mu.Unlock()
	for name, version := range versions {
		s := &corev1.Secret{}
		if err := r.reader.Get(ctx, types.NamespacedName{Namespace: r.namespace, Name: name}, s); err != nil {
			return !apierrors.IsForbidden(err) // gone or unreadable now: rebuild, and report why
		}
		if s.ResourceVersion != version {
			return true
		}
	}
	return false
}

// digest identifies the credentials a sink was built with, for the inventory's worker.
func (r *secretReads) digest() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := slices.Sorted(maps.Keys(r.versions))
	var b strings.Builder
	for _, n := range names {
		b.WriteString(n + "=" + r.versions[n] + ";")
	}
	return b.String()
}

// NewSinkBuilder returns the builder the reconcilers share.
func NewSinkBuilder(factories sink.Factories, reader client.Reader, cluster, cacheDir string, guard *egress.Guard, log logr.Logger) *SinkBuilder {
	return &SinkBuilder{factories: factories, reader: reader, cluster: cluster, cacheDir: cacheDir, egress: guard, log: log}
}

// GovernBy makes the builder consult g for what only a cluster scope may allow a sink.
func (b *SinkBuilder) GovernBy(g *ScopeGate) { b.scopes = g }

// bindingID changes whenever the sink must be rebuilt.
func bindingID(obj client.Object) string {
	return fmt.Sprintf("%s/%d", obj.GetUID(), obj.GetGeneration())
}

// sinkRefs lists an inventory's sinks as refs.
func sinkRefs(ns string, s kollectv1.SinkReferences) []inventory.SinkRef {
	var out []inventory.SinkRef
	for _, r := range s.Snapshot {
		out = append(out, inventory.SinkRef{Family: kollectv1.SinkFamilySnapshot, Namespace: ns, Name: r.Name})
	}
	for _, r := range s.Database {
		out = append(out, inventory.SinkRef{Family: kollectv1.SinkFamilyDatabase, Namespace: ns, Name: r.Name})
	}
	for _, r := range s.Event {
		out = append(out, inventory.SinkRef{Family: kollectv1.SinkFamilyEvent, Namespace: ns, Name: r.Name})
	}
	return out
}

func clusterSinkRefs(s kollectv1.ClusterSinkReferences) []inventory.SinkRef {
	var out []inventory.SinkRef
	add := func(f kollectv1.SinkFamily, refs []kollectv1.NamespacedObjectReference) {
		for _, r := range refs {
			out = append(out, inventory.SinkRef{Family: f, Namespace: r.Namespace, Name: r.Name})
		}
	}
	add(kollectv1.SinkFamilySnapshot, s.Snapshot)
	add(kollectv1.SinkFamilyDatabase, s.Database)
	add(kollectv1.SinkFamilyEvent, s.Event)
	return out
}
