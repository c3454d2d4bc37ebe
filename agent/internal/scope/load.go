package scope

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// Load lists every KollectScope and KollectClusterScope through c.
func Load(ctx context.Context, c client.Reader, tenantMode bool) (Set, error) {
	s := Set{TenantMode: tenantMode}
	var scopes kollectv1.KollectScopeList
	if err := c.List(ctx, &scopes); err != nil {
		return s, fmt.Errorf("listing KollectScopes: %w", err)
	}
	var cluster kollectv1.KollectClusterScopeList
	if err := c.List(ctx, &cluster); err != nil {
		return s, fmt.Errorf("listing KollectClusterScopes: %w", err)
	}
	s.Scopes, s.ClusterScopes = scopes.Items, cluster.Items
	return s, nil
}
