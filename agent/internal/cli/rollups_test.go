package cli

import (
	"strings"
	"testing"
)

// TestRenderRollups: kollect render computes the rollups of docs/examples/rollups.yaml as the
// agent does, and with rawRows Exclude prints no Deployment row.
func TestRenderRollups(t *testing.T) {
	out, errOut, code := run(t, "", "render", "../../../docs/examples/rollups.yaml", "testdata/rollups/deployments.yaml", "-o", "ndjson")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		`"attributes":{"count":2,"group":{"images":"registry.example/proxy:2","namespace":"shop"}}`,
		`"attributes":{"count":2,"group":{"team":"storefront"},"sum":{"replicas":5}}`,
		`"attributes":{"count":1,"group":{"team":null},"sum":{"replicas":1}}`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no row with %s in:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "\n"); n != 6 || strings.Contains(out, `"kind":"Deployment"`) {
		t.Fatalf("want the 6 rollup rows alone, got %d rows:\n%s", n, out)
	}
}
