package scope

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// Load lists every KollectScope and KollectClusterScope through c; opts narrow the
// KollectScopes (client.InNamespace for the rules of one namespace).
//
// The scopes are the cache's own objects, not copies (client.UnsafeDisableDeepCopy): a Set is
// read-only, and every export decision loads one, so with a scope per tenant copying them all
// made most of the agent's allocations while a hundred tenants' inventories started.
func Load(ctx context.Context, c client.Reader, tenantMode bool, opts ...client.ListOption) (Set, error) {
	s := Set{TenantMode: tenantMode}
	var scopes kollectv1.KollectScopeList
	if err := c.List(ctx, &scopes, append(opts, client.UnsafeDisableDeepCopy)...); err != nil {
		return s, fmt.Errorf("listing KollectScopes: %w", err)
	}
	var cluster kollectv1.KollectClusterScopeList
	if err := c.List(ctx, &cluster, client.UnsafeDisableDeepCopy); err != nil {
		return s, fmt.Errorf("listing KollectClusterScopes: %w", err)
	}
	s.Scopes, s.ClusterScopes = scopes.Items, cluster.Items
	return s, nil
}
