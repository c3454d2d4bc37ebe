package controller

import (
	"context"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// inventoriesUsing returns, sorted, the inventories that export to the sink family/ns/name,
// named as rows name them: namespace/name of a KollectInventory, the name of a
// KollectClusterInventory. A sink's preview describes what an export of one of these would do.
func inventoriesUsing(ctx context.Context, c client.Reader, family kollectv1.SinkFamily, ns, name string) ([]string, error) {
	var out []string
	var invs kollectv1.KollectInventoryList
	if err := c.List(ctx, &invs, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	for _, inv := range invs.Items {
		if slices.ContainsFunc(localRefs(inv.Spec.Sinks, family), func(r kollectv1.LocalObjectReference) bool { return r.Name == name }) {
			out = append(out, inv.Namespace+"/"+inv.Name)
		}
	}
	var cinvs kollectv1.KollectClusterInventoryList
	if err := c.List(ctx, &cinvs); err != nil {
		return nil, err
	}
	for _, inv := range cinvs.Items {
		if slices.ContainsFunc(clusterRefs(inv.Spec.Sinks, family), func(r kollectv1.NamespacedObjectReference) bool {
			return r.Namespace == ns && r.Name == name
		}) {
			out = append(out, inv.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}

func localRefs(s kollectv1.SinkReferences, f kollectv1.SinkFamily) []kollectv1.LocalObjectReference {
	switch f {
	case kollectv1.SinkFamilySnapshot:
		return s.Snapshot
	case kollectv1.SinkFamilyDatabase:
		return s.Database
	default:
		return s.Event
	}
}

func clusterRefs(s kollectv1.ClusterSinkReferences, f kollectv1.SinkFamily) []kollectv1.NamespacedObjectReference {
	switch f {
	case kollectv1.SinkFamilySnapshot:
		return s.Snapshot
	case kollectv1.SinkFamilyDatabase:
		return s.Database
	default:
		return s.Event
	}
}
