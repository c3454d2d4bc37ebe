package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDemo runs what `make demo` runs, non-interactively, so the newcomer's first command
// keeps working: the agent binary exports the sample inventory to git and a scaled
// Deployment becomes a one-row commit.
func TestDemo(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "kollect-agent")
	build := exec.Command("go", "build", "-o", bin, "./agent/cmd/kollect-agent")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the agent: %v\n%s", err, out)
	}
	demo := exec.Command("go", "run", "./e2e/cmd/kollect-demo")
	demo.Dir = root
	demo.Env = append(os.Environ(), "KOLLECT_DEMO_EXIT=1", "KOLLECT_AGENT_BIN="+bin)
	out, err := demo.CombinedOutput()
	if err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out)
	}
	for _, want := range []string{
		"kollectclusterinventory.kollect.dev/fleet",
		"demo/fleet/Deployment.yaml",
		"Rows: 0 added, 1 changed, 0 removed",
		"Deployment shop/cart",
		"+    replicas: 5",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
}
