package webhook

import (
	"context"
	"strings"
	"testing"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// TestAzureContainerExpandedWithTheAgentsCluster: the container is checked with the agent's
// cluster in place of {cluster}; without a cluster (kollect validate) the rest of the template
// is; a container without the placeholder is checked as it is, whatever the cluster.
func TestAzureContainerExpandedWithTheAgentsCluster(t *testing.T) {
	long := strings.Repeat("a", 50) + "-{cluster}" // 51 + the cluster: 63 for a 12-byte name
	for _, tc := range []struct {
		container string
		lookup    Lookup
		refusal   string
	}{
		{"kollect-{cluster}", clusterLookup{name: "east"}, ""},
		{"{cluster}", clusterLookup{name: "east"}, ""},
		{"inventory", clusterLookup{name: "prod/eu"}, ""},
		{"kollect-{cluster}", clusterLookup{name: "prod/eu"}, `with cluster name "prod/eu"`},
		{"kollect-{cluster}", clusterLookup{name: "East"}, "only lowercase letters"},
		{"kollect-{cluster}", clusterLookup{name: "-east"}, "two hyphens in a row"},
		{"{cluster}-kollect", clusterLookup{name: "east-"}, "two hyphens in a row"},
		{"{cluster}", clusterLookup{name: "ab"}, "Azure allows 3 to 63"},
		{long, clusterLookup{name: "eu-west-1-ab"}, ""},
		{long, clusterLookup{name: "eu-west-1-abc"}, "Azure allows 3 to 63"},
		{long, stubLookup{}, ""},
		{"kollect-{cluster}", stubLookup{}, ""},
		{"{cluster}", stubLookup{}, ""},
		{"kollect--{cluster}", stubLookup{}, "two hyphens in a row"},
		{"Inventory", stubLookup{}, "only lowercase letters"},
	} {
		ss := &kollectv1.KollectSnapshotSink{Spec: kollectv1.KollectSnapshotSinkSpec{Type: kollectv1.SnapshotSinkAzureBlob,
			AzureBlob: &kollectv1.AzureBlobSinkConfig{Account: "fleetlake", Container: tc.container,
				SecretRef: kollectv1.SecretReference{Name: "azure"}}}}
		res, err := Validate(context.Background(), ss, tc.lookup)
		if err != nil {
			t.Fatal(err)
		}
		got := res.Errors.ToAggregate()
		switch {
		case tc.refusal == "" && got != nil:
			t.Errorf("container %q (%T): %v, want it admitted", tc.container, tc.lookup, got)
		case tc.refusal != "" && (got == nil || !strings.Contains(got.Error(), "spec.azureBlob.container") || !strings.Contains(got.Error(), tc.refusal)):
			t.Errorf("container %q (%T): %v, want a refusal of spec.azureBlob.container with %q", tc.container, tc.lookup, got, tc.refusal)
		}
	}
}
