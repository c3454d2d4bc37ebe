package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"kollect.dev/e2e/testenv"
)

// TestDemo runs what `make demo` runs, non-interactively, so the newcomer's first command
// keeps working: a hub and two clusters whose agents receive the sample bundle through the
// hub, export both clusters' rows to one git repository, and turn a scaled Deployment into a
// one-row commit.
func TestDemo(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	bins := t.TempDir()
	if _, err := testenv.BuildCommands(bins, "", "./agent/cmd/kollect-agent", "./hub/cmd/kollect-hub"); err != nil {
		t.Fatal(err)
	}
	demo := exec.Command("go", "run", "./e2e/cmd/kollect-demo")
	demo.Dir = root
	demo.Env = append(os.Environ(), "KOLLECT_DEMO_EXIT=1", "KOLLECT_AGENT_BIN="+filepath.Join(bins, "kollect-agent"),
		"KOLLECT_HUB_BIN="+filepath.Join(bins, "kollect-hub"))
	out, err := demo.CombinedOutput()
	if err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out)
	}
	for _, want := range []string{
		"bundle inventory revision 1 goes to: east, west",
		"kollectclusterinventory.kollect.dev/fleet",
		"east/fleet/Deployment.yaml",
		"west/fleet/Deployment.yaml",
		"Rows: 0 added, 1 changed, 0 removed",
		"Deployment shop/cart",
		"+    replicas: 5",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
}
