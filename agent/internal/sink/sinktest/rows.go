package sinktest

import (
	"fmt"

	"kollect.dev/agent/internal/export"
)

// Deployment builds row i of an inventory of Deployments with the given attributes; its UID is
// unique per cluster and its namespace one of seven.
func Deployment(cluster, inventory string, i int, attrs map[string]any) export.Row {
	raw, err := export.EncodeAttributes(attrs)
	if err != nil {
		panic(err)
	}
	return export.Row{Cluster: cluster, Inventory: inventory, Target: "deployments", Group: "apps", Version: "v1",
		Kind: "Deployment", Namespace: fmt.Sprintf("ns-%d", i%7), Name: fmt.Sprintf("app-%05d", i),
		UID: fmt.Sprintf("%s-uid-%05d", cluster, i), Attributes: raw}
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
