package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"kollect.dev/agent/internal/cli/clitest"
)

// run executes kollect with args and returns stdout, stderr and the exit code.
func run(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Main(context.Background(), args, &Env{In: strings.NewReader(stdin), Out: &out, Err: &errOut})
	return out.String(), errOut.String(), code
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) { t.Helper(); clitest.Golden(t, name, got) }

func TestRenderGolden(t *testing.T) {
	for _, format := range []string{"table", "json", "yaml", "ndjson"} {
		t.Run(format, func(t *testing.T) {
			out, errOut, code := run(t, "", "render", "testdata/render/config.yaml", "testdata/render/objects.yaml", "--cluster", "demo", "-o", format)
			if code != ExitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			golden(t, "render."+format+".golden", out)
		})
	}
}

func TestRenderFromStdinAndOneInventory(t *testing.T) {
	objects, err := os.ReadFile("testdata/render/objects.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run(t, string(objects), "render", "testdata/render/config.yaml", "-", "-o", "ndjson", "--inventory", "shop/shop")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if n := strings.Count(out, "\n"); n != 4 {
		t.Fatalf("%d rows from stdin, want 4:\n%s", n, out)
	}
	// The export contract: an inventory never exports the Widget its match excludes.
	if strings.Contains(out, `"name":"small"`) || strings.Contains(out, `"name":"elsewhere"`) {
		t.Fatalf("rows the targets do not select:\n%s", out)
	}
}

func TestRenderExtractionFailureIsAFinding(t *testing.T) {
	out, errOut, code := run(t, "", "render", "testdata/render/", "-o", "ndjson")
	if code != ExitFindings {
		t.Fatalf("exit %d, want %d", code, ExitFindings)
	}
	if !strings.Contains(errOut, "testdata/render/broken.yaml:1: Deployment shop/no-replicas: target shop/deployments: not exported: missing required attribute(s) replicas") {
		t.Fatalf("stderr: %s", errOut)
	}
	if strings.Count(out, "\n") != 4 {
		t.Fatalf("the other rows must still print:\n%s", out)
	}
}

func TestValidate(t *testing.T) {
	_, errOut, code := run(t, "", "validate", "testdata/render/config.yaml")
	if code != ExitOK || !strings.Contains(errOut, "6 Kollect objects valid") {
		t.Fatalf("good file: exit %d: %s", code, errOut)
	}
	out, errOut, code := run(t, "", "validate", "testdata/validate/bad.yaml")
	if code != ExitFindings {
		t.Fatalf("bad file: exit %d, want %d: %s", code, ExitFindings, errOut)
	}
	golden(t, "validate.bad.golden", out)
	if !strings.Contains(errOut, "12 problems in 10 Kollect objects") {
		t.Fatalf("summary: %s", errOut)
	}
}

func TestValidateTenantMode(t *testing.T) {
	out, _, code := run(t, "", "validate", "--tenant-mode", "testdata/render/config.yaml")
	if code != ExitFindings || !strings.Contains(out, "ScopeMissing: tenant mode: namespace shop has no KollectScope") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"validate"},                          // no file
		{"validate", "testdata/missing.yaml"}, // unreadable
		{"render", "--no-such-flag", "x"},     // unknown flag
		{"render", "-o", "xml", "testdata/render/config.yaml"},
		{"no-such-command"},
		{"version", "extra"},
	} {
		if _, errOut, code := run(t, "", args...); code != ExitUsage {
			t.Errorf("%q: exit %d, want %d (%s)", args, code, ExitUsage, errOut)
		}
	}
}

func TestDocsExamplesValidate(t *testing.T) {
	files, err := filepath.Glob("../../../docs/examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples found: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			out, errOut, code := run(t, "", "validate", f)
			if code != ExitOK {
				t.Fatalf("exit %d:\n%s%s", code, out, errOut)
			}
		})
	}
}

func TestVersionAndCompletion(t *testing.T) {
	out, _, code := run(t, "", "version")
	if code != ExitOK || !strings.HasPrefix(out, "kollect ") {
		t.Fatalf("version: exit %d %q", code, out)
	}
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		out, errOut, code := run(t, "", "completion", shell)
		if code != ExitOK || !strings.Contains(out, "kollect") {
			t.Fatalf("completion %s: exit %d %s", shell, code, errOut)
		}
	}
	// Dynamic completion of -o values.
	out, _, _ = run(t, "", "__complete", "render", "-o", "")
	for _, f := range []string{"table", "json", "yaml", "ndjson"} {
		if !strings.Contains(out, f+"\n") {
			t.Fatalf("completion of -o lacks %s:\n%s", f, out)
		}
	}
}

// TestRolloutUsageErrors: bad hub rollout flags end with exit code 2 before any hub is asked
// (through the root command, which turns errors into exit codes).
func TestRolloutUsageErrors(t *testing.T) {
	t.Setenv("KOLLECT_HUB_CONFIG", t.TempDir()+"/none.json")
	for _, args := range [][]string{
		{"hub", "rollout", "start", "b", "--wave-size", "0"},
		{"hub", "rollout", "start", "b", "--canary", "size>3"},
		{"hub", "rollout", "start", "b", "--progress-deadline", "0s"},
		{"hub", "rollout", "start", "b", "--watch", "-o", "json"},
		{"hub", "rollout", "status"},
		{"hub", "rollout", "status", "7", "--bundle", "b"},
		{"hub", "rollout", "status", "seven"},
		{"hub", "rollout", "pause", "0"},
		{"hub", "rollout", "history", "-o", "xml"},
		{"hub", "rollout", "resume", "7"}, // not logged in
	} {
		if _, errOut, code := run(t, "", args...); code != ExitUsage {
			t.Errorf("%q: exit %d, want %d (%s)", args, code, ExitUsage, errOut)
		}
	}
}

// TestRenderDecodesHelmReleases: render decodes the Helm release Secret helm wrote (the
// helmrelease fixture) with the documented profile, as the agent does: one row named by the
// release, values redacted, and no trace of the Secret's data.
func TestRenderDecodesHelmReleases(t *testing.T) {
	out, errOut, code := run(t, "", "render", "../../../docs/examples/helm-releases.yaml",
		"../helmrelease/testdata/sh.helm.release.v1.demo.v2.json", "-o", "ndjson", "--cluster", "demo")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{`"name":"demo","namespace":"helm-apps"`, `"revision":2`, `"chart":"demo"`,
		`"values":{"database":{"password":"<redacted>"},"image":{"tag":"<redacted>"}}`} {
		if !strings.Contains(out, want) {
			t.Errorf("render output lacks %s:\n%s", want, out)
		}
	}
	if strings.Count(out, "\n") != 1 || strings.Contains(out, "hunter2") {
		t.Fatalf("want one row and no value:\n%s", out)
	}
}
