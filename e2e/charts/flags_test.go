package charts

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"kollect.dev/e2e/testenv"
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
		_, binaries.err = testenv.BuildCommands(binaries.dir, "", "./agent/cmd/kollect-agent", "./hub/cmd/kollect-hub")
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
