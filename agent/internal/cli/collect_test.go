package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"kollect.dev/agent/internal/cli/manifest"
	"kollect.dev/testenv"
)

var (
	cpOnce     sync.Once
	cp         *testenv.ControlPlane
	cpErr      error
	kubeconfig string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if cp != nil {
		_ = cp.Stop()
	}
	if kubeconfig != "" {
		_ = os.RemoveAll(filepath.Dir(kubeconfig))
	}
	os.Exit(code)
}

// cluster starts one control plane for the package (only the tests that need it pay), fills
// it with docs/examples/cli/objects.yaml and writes a kubeconfig with contexts local-a and
// local-b (both that control plane) and unreachable (a closed port).
func cluster(t *testing.T) string {
	t.Helper()
	cpOnce.Do(func() {
		if cp, cpErr = testenv.Start("cli", testenv.Options{}); cpErr != nil {
			return
		}
		docs, err := manifest.Load([]string{"../../../docs/examples/cli/objects.yaml"}, nil)
		if err != nil {
			cpErr = err
			return
		}
		for _, d := range docs {
			if err := cp.Client.Create(context.Background(), d.Object); err != nil {
				cpErr = fmt.Errorf("creating %s: %w", d.Where(), err)
				return
			}
		}
		raw, err := clientcmd.LoadFromFile(cp.Kubeconfig)
		if err != nil {
			cpErr = err
			return
		}
		kc := clientcmdapi.NewConfig()
		for _, name := range []string{"local-a", "local-b"} {
			kc.Clusters[name] = raw.Clusters[cp.Name]
			kc.AuthInfos[name] = raw.AuthInfos[cp.Name]
			kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
		}
		kc.Clusters["unreachable"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1", InsecureSkipTLSVerify: true}
		kc.Contexts["unreachable"] = &clientcmdapi.Context{Cluster: "unreachable", AuthInfo: "local-a"}
		kc.CurrentContext = "local-a"
		dir, err := os.MkdirTemp("", "kollect-cli-")
		if err != nil {
			cpErr = err
			return
		}
		kubeconfig = filepath.Join(dir, "kubeconfig")
		cpErr = clientcmd.WriteToFile(*kc, kubeconfig)
	})
	if cpErr != nil {
		t.Fatal(cpErr)
	}
	return kubeconfig
}

func TestCollectFromSeveralContexts(t *testing.T) {
	kc := cluster(t)
	out, errOut, code := run(t, "", "collect", "../../../docs/examples/cli/shop.yaml", "--kubeconfig", kc, "--context", "local-*", "-o", "ndjson")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d rows, want 2 deployments × 2 contexts:\n%s", len(lines), out)
	}
	for i, l := range lines {
		wantCluster := []string{"local-a", "local-a", "local-b", "local-b"}[i]
		if !strings.Contains(l, `"cluster":"`+wantCluster+`"`) || strings.Contains(l, `"uid":""`) {
			t.Fatalf("row %d: %s", i, l)
		}
	}
	// Without --context: the current one.
	out, _, code = run(t, "", "collect", "../../../docs/examples/cli/shop.yaml", "--kubeconfig", kc, "-o", "ndjson")
	if code != ExitOK || strings.Count(out, `"cluster":"local-a"`) != 2 || strings.Contains(out, "local-b") {
		t.Fatalf("current context: exit %d\n%s", code, out)
	}
}

func TestCollectConnectionErrorsExitTwo(t *testing.T) {
	kc := cluster(t)
	out, errOut, code := run(t, "", "collect", "../../../docs/examples/cli/shop.yaml", "--kubeconfig", kc,
		"--context", "unreachable", "--context", "local-a", "--timeout", "5s", "-o", "ndjson")
	if code != ExitUsage {
		t.Fatalf("exit %d, want %d", code, ExitUsage)
	}
	if !strings.Contains(errOut, "context unreachable:") || !strings.Contains(errOut, "could not collect from unreachable") {
		t.Fatalf("stderr: %s", errOut)
	}
	if strings.Count(out, `"cluster":"local-a"`) != 2 {
		t.Fatalf("the reachable cluster's rows must still print:\n%s", out)
	}
	if _, errOut, code := run(t, "", "collect", "../../../docs/examples/cli/shop.yaml", "--kubeconfig", kc, "--context", "nope-*"); code != ExitUsage ||
		!strings.Contains(errOut, `no kubeconfig context matches "nope-*"`) {
		t.Fatalf("unknown context: exit %d %s", code, errOut)
	}
}

// TestCLIDoc runs every `$ kollect …` line of docs/cli.md from the repository root and compares
// standard output with the lines shown below it; `$ echo $?` checks the exit code.
func TestCLIDoc(t *testing.T) {
	t.Setenv("KUBECONFIG", cluster(t))
	doc, err := os.ReadFile("../../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir("../../..")
	if n := runDocCommands(t, "docs/cli.md", string(doc)); n < 6 {
		t.Fatalf("only %d commands found in docs/cli.md", n)
	}
}

// splitArgs splits a command line on spaces, honouring single quotes.
func splitArgs(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	quoted, has := false, false
	for _, r := range s {
		switch {
		case r == '\'':
			quoted, has = !quoted, true
		case r == ' ' && !quoted:
			if has {
				out = append(out, cur.String())
				cur.Reset()
				has = false
			}
		default:
			cur.WriteRune(r)
			has = true
		}
	}
	if quoted {
		return nil, fmt.Errorf("unclosed quote in %q", s)
	}
	if has {
		out = append(out, cur.String())
	}
	return out, nil
}

func TestCollectProgressLineOnlyOnATerminal(t *testing.T) {
	kc := cluster(t)
	var out, errOut bytes.Buffer
	code := Main(context.Background(), []string{"collect", "../../../docs/examples/cli/shop.yaml", "--kubeconfig", kc, "--context", "local-b", "-o", "ndjson"},
		&Env{In: strings.NewReader(""), Out: &out, Err: &errOut, Terminal: true})
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	progress := errOut.String()
	if !strings.Contains(progress, "\r\033[K[1/1] local-b: listing deployments.v1.apps") || !strings.HasSuffix(progress, "\r\033[K") {
		t.Fatalf("progress line on a terminal: %q", progress)
	}
	if strings.Contains(out.String(), "\r") {
		t.Fatal("progress leaked into the rows")
	}
	if _, errText, _ := run(t, "", "collect", "../../../docs/examples/cli/shop.yaml", "--kubeconfig", kc, "--context", "local-b"); errText != "" {
		t.Fatalf("progress drawn without a terminal: %q", errText)
	}
}
