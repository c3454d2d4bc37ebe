package webhook

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/scope"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// ClientLookup answers from the API server. Reader should read through (the manager's API
// reader): a scope created a moment ago must already count.
type ClientLookup struct {
	Reader     client.Reader
	Mapper     apimeta.RESTMapper
	TenantMode bool
	// Cluster is the agent's cluster name, which {cluster} in a Kafka topic or an Azure Blob
	// container stands for.
	Cluster string
}

// AgentCluster implements ClusterNamer.
func (c *ClientLookup) AgentCluster() string { return c.Cluster }

// Profile implements Lookup.
func (c *ClientLookup) Profile(ctx context.Context, ns, name string) (*kollectv1.KollectProfile, error) {
	p := &kollectv1.KollectProfile{}
	if err := c.Reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, p); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading KollectProfile %s/%s: %w", ns, name, err)
	}
	return p, nil
}

// SinkFamilies implements Lookup.
func (c *ClientLookup) SinkFamilies(ctx context.Context, ns, name string) ([]kollectv1.SinkFamily, error) {
	var out []kollectv1.SinkFamily
	for _, f := range []struct {
		fam kollectv1.SinkFamily
		obj client.Object
	}{
		{kollectv1.SinkFamilySnapshot, &kollectv1.KollectSnapshotSink{}},
		{kollectv1.SinkFamilyDatabase, &kollectv1.KollectDatabaseSink{}},
		{kollectv1.SinkFamilyEvent, &kollectv1.KollectEventSink{}},
	} {
		err := c.Reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, f.obj)
		switch {
		case err == nil:
			out = append(out, f.fam)
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("reading %s sink %s/%s: %w", f.fam, ns, name, err)
		}
	}
	return out, nil
}

// Scopes implements Lookup.
func (c *ClientLookup) Scopes(ctx context.Context) (scope.Set, error) {
	return scope.Load(ctx, c.Reader, c.TenantMode)
}

// NamespaceLabels implements Lookup.
func (c *ClientLookup) NamespaceLabels(ctx context.Context, ns string) (labels.Set, error) {
	n := &corev1.Namespace{}
	if err := c.Reader.Get(ctx, types.NamespacedName{Name: ns}, n); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading namespace %s: %w", ns, err)
	}
	return n.Labels, nil
}

// Namespaced implements Lookup.
func (c *ClientLookup) Namespaced(gk schema.GroupKind) (bool, bool) {
	if c.Mapper == nil {
		return true, false
	}
	m, err := c.Mapper.RESTMapping(gk)
	if err != nil {
		return true, false
	}
	return m.Scope.Name() == apimeta.RESTScopeNameNamespace, true
}
