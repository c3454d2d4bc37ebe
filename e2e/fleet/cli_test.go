package fleet

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kollect.dev/e2e/dashboard/fleetsim"
	"kollect.dev/testenv"
)

// TestHubCLI drives a real hub with the kollect binary: login with a pinned CA, tokens,
// bundle apply, history and diff, and the refusals that must reach the user as exit code 1.
func TestHubCLI(t *testing.T) {
	t.Parallel() // its own control planes, hub and ports: it waits alongside the others
	work := t.TempDir()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	h := startHub(t, work, fmt.Sprintf("127.0.0.1:%d", port))
	config := filepath.Join(work, "hub.json")
	kollect := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(bins.kollect, args...)
		cmd.Env = append(os.Environ(), "KOLLECT_HUB_CONFIG="+config)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	must := func(want string, args ...string) string {
		t.Helper()
		out, code := kollect(args...)
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("kollect %s: exit %d, want %q in:\n%s", strings.Join(args, " "), code, want, out)
		}
		return out
	}
	url := "https://" + h.addr
	if out, code := kollect("hub", "login", "--url", url, "--token", h.adminToken, "--ca-fingerprint", "sha256:"+strings.Repeat("0", 64)); code != 2 || !strings.Contains(out, "pinned CA") {
		t.Fatalf("login with a wrong pin: exit %d:\n%s", code, out)
	}
	must("logged in to "+url, "hub", "login", "--url", url, "--token", h.adminToken, "--ca-fingerprint", h.fingerprint)
	must("admin (admin) on "+url, "hub", "whoami")
	must("secret: ", "hub", "token", "create", "--uses", "2", "--description", "cli test")

	bundle := filepath.Join(work, "bundle.yaml")
	write := func(debounce string) {
		doc := fmt.Sprintf(bundleTemplate, filepath.Join(work, "repo.git"), debounce)
		if err := os.WriteFile(bundle, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("1s")
	must("created revision 1", "hub", "bundle", "apply", "inventory", "-f", bundle, "--selector", "env=e2e", "-m", "first")
	must("unchanged at revision 1", "hub", "bundle", "apply", "inventory", "-f", bundle, "--selector", "env=e2e")
	write("2s")
	must("created revision 2", "hub", "bundle", "apply", "inventory", "-f", bundle, "--selector", "env=e2e", "-m", "slower")
	must("+  debounce: 2s", "hub", "bundle", "diff", "inventory")
	must("slower", "hub", "bundle", "history", "inventory")
	must("CLUSTER", "hub", "clusters")

	// A preview answered by simulated agents (fleetsim makes its figures up from the
	// manifests): one clean cluster, one with extraction errors, exit code 1.
	created := must("secret: ", "hub", "token", "create", "--uses", "2")
	boot := strings.TrimSpace(created[strings.Index(created, "secret: ")+len("secret: "):])
	sim, err := fleetsim.New("https://"+h.addr, h.caPEM, boot, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	for _, c := range []fleetsim.Cluster{
		{Name: "canary-a", Labels: map[string]string{"ring": "canary", "errors": "none"}, AgentVersion: "sim", K8sVersion: "v1.33.4"},
		{Name: "canary-b", Labels: map[string]string{"ring": "canary"}, AgentVersion: "sim", K8sVersion: "v1.33.4", PreviewErrors: 2},
	} {
		if err := sim.Add(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	must("preview pv-", "hub", "bundle", "preview", "inventory", "-f", bundle, "--selector", "errors=none")
	out, code := kollect("hub", "bundle", "preview", "inventory", "-f", bundle, "--selector", "ring=canary", "--timeout", "20s")
	for _, want := range []string{"2 answered, 0 pending, 0 not connected", "cluster canary-a", "cluster canary-b",
		"color on team-a/legacy-0: color: no such key", "canary-b reports extraction errors"} {
		if code != 1 || !strings.Contains(out, want) {
			t.Fatalf("preview with extraction errors: exit %d, want 1 and %q in:\n%s", code, want, out)
		}
	}
	must(`"pv-`, "hub", "bundle", "preview", "-f", bundle, "--selector", "errors=none", "-o", "json")
	if out, code := kollect("hub", "bundle", "preview", "-f", bundle, "--selector", "ring=nowhere"); code != 1 || !strings.Contains(out, "selects no cluster") {
		t.Fatalf("preview selecting no cluster: exit %d:\n%s", code, out)
	}
	if out, code := kollect("hub", "bundle", "preview", "-f", bundle); code != 2 || !strings.Contains(out, "--selector is required") {
		t.Fatalf("preview without a selector: exit %d:\n%s", code, out)
	}

	// Refusals are findings (exit 1) with the hub's message.
	bad := strings.Replace(fmt.Sprintf(bundleTemplate, "/x", "1s"), `jsonPath: "{.data.color}"`, `cel: "object.data.color +"`, 1)
	if err := os.WriteFile(bundle, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := kollect("hub", "bundle", "apply", "inventory", "-f", bundle); code != 1 || !strings.Contains(out, "configmaps") {
		t.Fatalf("bad bundle: exit %d:\n%s", code, out)
	}
	viewer := must("secret: ", "hub", "token", "create-api", "--name", "reader", "--role", "viewer")
	secret := strings.TrimSpace(viewer[strings.Index(viewer, "secret: ")+len("secret: "):])
	must("logged in", "hub", "login", "--url", url, "--token", secret, "--ca-fingerprint", h.fingerprint)
	must("reader (viewer) on "+url, "hub", "whoami")
	write("3s")
	if out, code := kollect("hub", "bundle", "apply", "inventory", "-f", bundle); code != 1 || !strings.Contains(strings.ToLower(out), "permission") {
		t.Fatalf("viewer apply: exit %d:\n%s", code, out)
	}
	if out, code := kollect("hub", "bundle", "preview", "-f", bundle, "--selector", "ring=canary"); code != 1 || !strings.Contains(out, "PreviewBundle needs role operator") {
		t.Fatalf("viewer preview: exit %d:\n%s", code, out)
	}
}
