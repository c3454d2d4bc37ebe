package apitest

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"kollect.dev/testenv"
)

// TestInvalidRollupsAreRefused sends inventories with bad rollups; the API server refuses
// each with a message that says what is wrong (docs/rollups.md, "Validation").
func TestInvalidRollupsAreRefused(t *testing.T) {
	createNamespace(t, "invalid-rollups")
	cases := []struct{ name, doc, want string }{
		{"rawRows Exclude without a rollup", `
kind: KollectInventory
spec:
  targets: [{name: t}]
  rawRows: Exclude`, "rawRows Exclude needs at least one rollup"},
		{"unknown rawRows", `
kind: KollectInventory
spec:
  targets: [{name: t}]
  rawRows: Some`, `supported values: "Include", "Exclude"`},
		{"rollup name that is no DNS label", `
kind: KollectInventory
spec:
  targets: [{name: t}]
  rollups: [{name: Per_Team, groupBy: [team]}]`, "spec.rollups[0].name"},
		{"duplicate rollup names", `
kind: KollectInventory
spec:
  targets: [{name: t}]
  rollups: [{name: r, groupBy: [team]}, {name: r, groupBy: [app]}]`, "Duplicate value"},
		{"unknown built-in in groupBy", `
kind: KollectInventory
spec:
  targets: [{name: t}]
  rollups: [{name: r, groupBy: [.cluster]}]`, "spec.rollups[0].groupBy[0]"},
		{"built-in and attribute of the same name", `
kind: KollectInventory
spec:
  targets: [{name: t}]
  rollups: [{name: r, groupBy: [.namespace, namespace]}]`, "groupBy cannot hold both a built-in (.namespace) and an attribute of the same name"},
		{"sum of a non-identifier", `
kind: KollectInventory
spec:
  targets: [{name: t}]
  rollups: [{name: r, sum: [spec.replicas]}]`, "spec.rollups[0].sum[0]"},
		{"rollup named like a cluster target", `
kind: KollectClusterInventory
spec:
  targets: [{name: deployments}]
  rollups: [{name: deployments, groupBy: [.namespace]}]`, "a rollup cannot have the name of a cluster target"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := mustParse(t, "apiVersion: kollect.dev/v1alpha1\n"+strings.TrimSpace(tc.doc))
			obj.SetName(fmt.Sprintf("rollup-%d", i))
			if isNamespaced(obj.GetKind()) {
				obj.SetNamespace("invalid-rollups")
			}
			err := cp.Client.Create(context.Background(), obj)
			if err == nil {
				t.Fatalf("accepted, want refusal containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("refused with\n  %v\nwant a message containing\n  %q", err, tc.want)
			}
		})
	}
}

// TestRollupFieldsAreExplained: kubectl explain describes the rollup fields from the CRDs.
func TestRollupFieldsAreExplained(t *testing.T) {
	assets, err := testenv.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"kollectinventories.spec.rollups":                "export aggregate rows",
		"kollectinventories.spec.rollups.groupBy":        "A list-valued attribute groups by each of its elements",
		"kollectinventories.spec.rollups.sum":            "is skipped and counted in the rollup's coverage",
		"kollectinventories.spec.rawRows":                "only the rollup rows are exported",
		"kollectclusterinventories.spec.rollups.targets": "namespace/name of a KollectTarget",
	} {
		out, err := exec.Command(filepath.Join(assets, "kubectl"), "--kubeconfig", cp.Kubeconfig, "explain", path).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl explain %s: %v\n%s", path, err, out)
		}
		if text := strings.Join(strings.Fields(string(out)), " "); !strings.Contains(text, want) {
			t.Errorf("kubectl explain %s lacks %q:\n%s", path, want, out)
		}
	}
}
