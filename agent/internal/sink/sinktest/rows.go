package sinktest

import (
	"fmt"

	"kollect.dev/agent/internal/export"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// Deployment builds row i of an inventory of Deployments with the given attributes; its UID is
// unique per cluster and its namespace one of seven.
func Deployment(cluster, inventory string, i int, attrs map[string]any) export.Row {
	raw, err := export.EncodeAttributes(attrs)
	if err != nil {
		panic(err)
	}
	return export.Row{Origin: &export.Origin{Cluster: cluster, Inventory: inventory, Target: "deployments", Group: "apps", Version: "v1", Kind: "Deployment", Profile: "fleet/deployments", ProfileGeneration: 3}, Namespace: fmt.Sprintf("ns-%d", i%7), Name: fmt.Sprintf("app-%05d", i), UID: fmt.Sprintf("%s-uid-%05d", cluster, i), Attributes: raw}
}

// Deployments builds n rows whose attributes (replicas, image, labels) depend on version, so
// bumping it changes every row.
func Deployments(cluster, inventory string, n, version int) []export.Row {
	rows := make([]export.Row, n)
	for i := range rows {
		rows[i] = Deployment(cluster, inventory, i, map[string]any{
			"replicas": i % 5, "image": fmt.Sprintf("registry.example/app:%d", version),
			"labels": map[string]any{"team": fmt.Sprintf("team-%d", i%3)},
		})
	}
	return rows
}

// Services builds n Service rows of target "services", beside Deployments' rows in a
// snapshot with two targets.
func Services(cluster, inventory string, n int) []export.Row {
	out := make([]export.Row, n)
	for i := range out {
		out[i] = Deployment(cluster, inventory, 100+i, map[string]any{"port": 80 + i}).With(func(o *export.Origin) {
			o.Group, o.Kind, o.Target = "", "Service", "services"
		})
	}
	return out
}

// Complete is a complete coverage entry of target with rows rows.
func Complete(target string, rows int64) export.Coverage {
	return export.Coverage{Target: target, State: kollectv1.CoverageComplete, Rows: rows}
}
