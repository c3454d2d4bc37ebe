package charts

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestCRDsInSync: the agent chart installs exactly the CRDs generated from the API types.
func TestCRDsInSync(t *testing.T) {
	want, err := filepath.Glob(filepath.Join(root, "api", "crds", "*.yaml"))
	if err != nil || len(want) == 0 {
		t.Fatalf("no CRDs in api/crds: %v", err)
	}
	got, _ := filepath.Glob(filepath.Join(root, "charts", "agent", "files", "crds", "*.yaml"))
	if len(got) != len(want) {
		t.Fatalf("charts/agent/files/crds has %d CRDs, api/crds %d: run hack/generate-charts.sh", len(got), len(want))
	}
	for _, w := range want {
		a, _ := os.ReadFile(w)
		b, err := os.ReadFile(filepath.Join(root, "charts", "agent", "files", "crds", filepath.Base(w)))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("charts/agent/files/crds/%s differs from api/crds: run hack/generate-charts.sh", filepath.Base(w))
		}
	}
}

// TestREADMEsInSync: each chart's README.md is what the generator makes of its values.yaml.
func TestREADMEsInSync(t *testing.T) {
	tmp := t.TempDir()
	var dirs []string
	for _, chart := range []string{"agent", "hub"} {
		dir := filepath.Join(tmp, chart)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"values.yaml", "README.intro.md"} {
			b, err := os.ReadFile(filepath.Join(root, "charts", chart, f))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		dirs = append(dirs, dir)
	}
	cmd := exec.Command("go", append([]string{"run", "."}, dirs...)...)
	cmd.Dir = filepath.Join(root, "hack", "gen-chart-readme")
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gen-chart-readme: %v\n%s", err, out)
	}
	for i, chart := range []string{"agent", "hub"} {
		want, _ := os.ReadFile(filepath.Join(dirs[i], "README.md"))
		got, _ := os.ReadFile(filepath.Join(root, "charts", chart, "README.md"))
		if !bytes.Equal(want, got) {
			t.Errorf("charts/%s/README.md is stale: run hack/generate-charts.sh", chart)
		}
	}
}

// TestKindFleetScript: the kind scenario cannot run here (no Docker engine), so at least it must
// parse and pass shellcheck.
func TestKindFleetScript(t *testing.T) {
	script := filepath.Join(root, "e2e", "kind-fleet", "run.sh")
	if out, err := exec.Command("bash", "-n", script).CombinedOutput(); err != nil {
		t.Fatalf("bash -n: %v\n%s", err, out)
	}
	if out, err := run(filepath.Dir(script), tool(t, "shellcheck"), "--severity=style", "--external-sources", script); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}
