package cli

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"

	kollectwebhook "kollect.dev/agent/internal/webhook"
)

// runDocCommands runs the `$ kollect …` lines of the console blocks of a document in the
// current directory, compares standard output with the lines shown below each (when any) and
// checks `$ echo $?` against the previous exit code. It returns how many commands ran.
func runDocCommands(t *testing.T, name, doc string) int {
	t.Helper()
	type step struct {
		line int
		cmd  string
		want []string
	}
	var steps []step
	inConsole := false
	for i, l := range strings.Split(doc, "\n") {
		switch {
		case l == "```console":
			inConsole = true
		case inConsole && l == "```":
			inConsole = false
		case inConsole && strings.HasPrefix(l, "$ "):
			steps = append(steps, step{line: i + 1, cmd: strings.TrimPrefix(l, "$ ")})
		case inConsole && len(steps) > 0:
			steps[len(steps)-1].want = append(steps[len(steps)-1].want, l)
		}
	}
	lastCode, ran := -1, 0
	for _, s := range steps {
		if s.cmd == "echo $?" {
			if len(s.want) != 1 || s.want[0] != strconv.Itoa(lastCode) {
				t.Errorf("%s:%d: exit code %d, the doc says %q", name, s.line, lastCode, s.want)
			}
			continue
		}
		args, err := splitArgs(strings.TrimPrefix(s.cmd, "kollect "))
		if err != nil || !strings.HasPrefix(s.cmd, "kollect ") {
			t.Fatalf("%s:%d: cannot run %q", name, s.line, s.cmd)
		}
		out, errOut, code := run(t, "", args...)
		lastCode = code
		ran++
		if len(s.want) > 0 && out != strings.Join(s.want, "\n")+"\n" {
			t.Errorf("%s:%d: %s\n--- got\n%s--- doc\n%s\n(stderr: %s)", name, s.line, s.cmd, out, strings.Join(s.want, "\n"), errOut)
		}
	}
	return ran
}

// yamlBlocks returns the contents of the ```yaml blocks of a document.
func yamlBlocks(doc string) []string {
	var out []string
	var cur []string
	in := false
	for _, l := range strings.Split(doc, "\n") {
		switch {
		case l == "```yaml":
			in, cur = true, nil
		case in && l == "```":
			in = false
			out = append(out, strings.Join(cur, "\n")+"\n")
		case in:
			cur = append(cur, l)
		}
	}
	return out
}

// TestTenancyDoc writes the YAML blocks of docs/tenancy.md that name a file to that file and
// runs the document's commands over them.
func TestTenancyDoc(t *testing.T) {
	raw, err := os.ReadFile("../../../docs/tenancy.md")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := 0
	for _, b := range yamlBlocks(string(raw)) {
		first, _, _ := strings.Cut(b, "\n")
		name, ok := strings.CutPrefix(first, "# file: ")
		if !ok {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
		files++
	}
	if files != 2 {
		t.Fatalf("%d example files in docs/tenancy.md, want 2", files)
	}
	t.Chdir(dir)
	if n := runDocCommands(t, "docs/tenancy.md", string(raw)); n != 1 {
		t.Fatalf("%d commands ran", n)
	}
}

// TestWebhookConfigurationDoc checks the webhook configuration shown in docs/tenancy.md.
func TestWebhookConfigurationDoc(t *testing.T) {
	raw, err := os.ReadFile("../../../docs/tenancy.md")
	if err != nil {
		t.Fatal(err)
	}
	cfg := kollectwebhook.Configuration("kollect-agent", admissionregistrationv1.ServiceReference{Namespace: "kollect-system", Name: "kollect-agent-webhook"}, nil)
	if len(cfg.Webhooks) != 10 {
		t.Fatalf("%d webhooks, the doc says ten", len(cfg.Webhooks))
	}
	cfg.Webhooks = cfg.Webhooks[:1]
	want, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range yamlBlocks(string(raw)) {
		if strings.Contains(b, "kind: ValidatingWebhookConfiguration") {
			if b != string(want) {
				t.Fatalf("docs/tenancy.md shows\n%s\nConfiguration builds\n%s", b, want)
			}
			return
		}
	}
	t.Fatal("no ValidatingWebhookConfiguration in docs/tenancy.md")
}
