package charts

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"kollect.dev/e2e/internal/flagdoc"
	"kollect.dev/testenv"
)

// binaries builds kollect-agent and kollect-hub once for the package.
var binaries = struct {
	once sync.Once
	dir  string
	err  error
}{}

// binary returns the path of a built command: "kollect-agent" or "kollect-hub".
func binary(t *testing.T, name string) string {
	t.Helper()
	binaries.once.Do(func() {
		if binaries.dir, binaries.err = os.MkdirTemp("", "kollect-charts-bin-"); binaries.err != nil {
			return
		}
		_, binaries.err = testenv.BuildCommands(binaries.dir, "", "./agent/cmd/kollect-agent", "./hub/cmd/kollect-hub", "./agent/cmd/kollect")
	})
	if binaries.err != nil {
		t.Fatalf("building the commands: %v", binaries.err)
	}
	return filepath.Join(binaries.dir, name)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binaries.dir != "" {
		os.RemoveAll(binaries.dir)
	}
	os.Exit(code)
}

var flagName = regexp.MustCompile(`(?m)^\s+-{1,2}([a-z0-9-]+)`)

// TestChartFlagsExist: every flag a chart passes, in every case, is one the command defines
// (an unknown flag makes the pod exit at start), so renaming a flag breaks this test, not a
// user's cluster.
func TestChartFlagsExist(t *testing.T) {
	defined := map[string]map[string]bool{}
	for chart, cmd := range map[string]string{"agent": "kollect-agent", "hub": "kollect-hub"} {
		// -h prints the flags and exits 0 or 2 depending on the flag package; the output counts.
		out, _ := exec.Command(binary(t, cmd), "-h").CombinedOutput()
		defined[chart] = map[string]bool{}
		for _, m := range flagName.FindAllStringSubmatch(string(out), -1) {
			defined[chart][m[1]] = true
		}
		if !defined[chart]["help"] && len(defined[chart]) < 5 {
			t.Fatalf("%s -h listed no flags:\n%s", cmd, out)
		}
	}
	for _, c := range cases {
		out, err := render(t, c)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for _, a := range args(t, decode(t, out)) {
			name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if !defined[c.chart][name] {
				t.Errorf("%s: the chart passes --%s, which %s does not define", c.name, name, c.chart)
			}
		}
	}
}

// TestFlagTablesMatchBinaries: the flag tables of docs/operations.md and docs/hub.md are what
// the built kollect-agent and kollect-hub print for -h, so a flag added, renamed or re-described
// in code without `make generate` fails here.
func TestFlagTablesMatchBinaries(t *testing.T) {
	for command, page := range flagdoc.Documents {
		help, err := flagdoc.Help(binary(t, command))
		if err != nil {
			t.Fatal(err)
		}
		doc, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatal(err)
		}
		want, err := flagdoc.Splice(string(doc), command, flagdoc.Markdown(flagdoc.Parse(help)))
		if err != nil {
			t.Fatalf("%s: %v", page, err)
		}
		if want != string(doc) {
			t.Errorf("%s: the flag table of %s is stale; run make generate", page, command)
		}
		for _, f := range flagdoc.Parse(help) {
			if !strings.Contains(string(doc), "`--"+f.Name+"`") {
				t.Errorf("%s does not document --%s of %s", page, f.Name, command)
			}
		}
	}
}

// TestAgentRefusesANonPositiveBreakerCooldown: --sink-breaker-cooldown, documented in
// docs/operations.md, is read by the shipped agent: a cooldown of zero or less would retry an
// open breaker's sink without pause, so the agent refuses it at start, naming the flag, before
// it connects to anything; a positive value gets past that check (it then fails on the missing
// kubeconfig, which shows the flag was accepted).
func TestAgentRefusesANonPositiveBreakerCooldown(t *testing.T) {
	agent := binary(t, "kollect-agent")
	for _, v := range []string{"0s", "-1m"} {
		cmd := exec.Command(agent, "--cluster-name=c", "--sink-breaker-cooldown="+v)
		cmd.Env = append(os.Environ(), "KUBECONFIG=/nonexistent")
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "--sink-breaker-cooldown must be positive") {
			t.Errorf("--sink-breaker-cooldown=%s: %v, want exit 2 naming the flag:\n%s", v, err, out)
		}
	}
	cmd := exec.Command(agent, "--cluster-name=c", "--sink-breaker-cooldown=15s", "--metrics-bind-address=0", "--health-probe-bind-address=0")
	cmd.Env = append(os.Environ(), "KUBECONFIG=/nonexistent")
	out, _ := cmd.CombinedOutput()
	if strings.Contains(string(out), "--sink-breaker-cooldown") {
		t.Errorf("--sink-breaker-cooldown=15s was refused:\n%s", out)
	}
}
