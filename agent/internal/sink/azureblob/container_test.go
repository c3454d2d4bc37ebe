package azureblob

import (
	"strings"
	"testing"

	"kollect.dev/agent/internal/sink"
)

// TestContainerName: {cluster} is expanded with the cluster name, a container without it is
// used as given whatever the cluster, and a name Azure would refuse is a terminal error
// naming the template and the cluster.
func TestContainerName(t *testing.T) {
	for _, tc := range []struct {
		template, cluster, want, refusal string
	}{
		{"kollect-{cluster}", "east", "kollect-east", ""},
		{"{cluster}-{cluster}", "east", "east-east", ""},
		{"inventory", "", "inventory", ""},
		{"inventory", "Prod/EU", "inventory", ""},
		{"kollect-{cluster}", "", "", "no cluster name"},
		{"kollect-{cluster}", "prod.eu", "", `with cluster name "prod.eu"`},
		{"kollect-{cluster}", strings.Repeat("a", 56), "", "Azure allows 3 to 63"},
		{"Inventory", "", "", "only lowercase letters"},
		{"in", "", "", "Azure allows 3 to 63"},
	} {
		got, err := ContainerName(tc.template, tc.cluster)
		switch {
		case tc.refusal == "" && (err != nil || got != tc.want):
			t.Errorf("%q with %q: %q, %v; want %q", tc.template, tc.cluster, got, err, tc.want)
		case tc.refusal != "" && (err == nil || !strings.Contains(err.Error(), tc.refusal) || sink.ClassOf(err) != sink.Terminal):
			t.Errorf("%q with %q: %q, %v; want a terminal error with %q", tc.template, tc.cluster, got, err, tc.refusal)
		}
	}
}

// TestExpandRef: kollect sinks purge expands the container of ACCOUNT/CONTAINER[/PREFIX] only.
func TestExpandRef(t *testing.T) {
	for ref, want := range map[string]string{
		"fleetlake/kollect-{cluster}/fleet/{cluster}": "fleetlake/kollect-east/fleet/{cluster}",
		"fleetlake/kollect-{cluster}":                 "fleetlake/kollect-east",
		"fleetlake/inventory/fleet":                   "fleetlake/inventory/fleet",
	} {
		if got, err := ExpandRef(ref, "east"); err != nil || got != want {
			t.Errorf("ExpandRef(%q): %q, %v; want %q", ref, got, err, want)
		}
	}
	if _, err := ExpandRef("fleetlake/kollect-{cluster}", "Prod"); err == nil {
		t.Error("ExpandRef with cluster Prod: no error")
	}
}
