package node

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"kollect.dev/testenv"
)

// TestGettingStartedWithHelm runs the commands of docs/getting-started.md §2 as written, with
// bash, from the repository's root, against the node: the chart's default image (the published
// name and the chart's appVersion) is the one `make images` built, given that name in the
// node's containerd as a pull would. The team's namespace exists, as it does for a user.
func TestGettingStartedWithHelm(t *testing.T) {
	e := setup(t)
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "getting-started.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := string(doc)[strings.Index(string(doc), "## 2."):]
	section = section[:strings.Index(section, "\n## 3.")]
	m := regexp.MustCompile("(?s)```sh\n(.*?)```").FindStringSubmatch(section)
	if m == nil {
		t.Fatal("getting-started.md §2 has no sh block")
	}
	appVersion := regexp.MustCompile(`(?m)^appVersion: "?([^"\n]+)"?$`).FindStringSubmatch(readFile(t, filepath.Join(root, "charts", "agent", "Chart.yaml")))
	if err := e.cluster.TagImage(e.images["agent"].Ref(), "ghcr.io/kollect-dev/agent:"+appVersion[1]); err != nil {
		t.Fatal(err)
	}
	_, _ = e.kubectlErr("", "create", "namespace", "team-a")

	cmd := exec.Command("bash", "-euxo", "pipefail", "-c", m[1])
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.cluster.Kubeconfig,
		"PATH="+filepath.Dir(e.helm)+":"+filepath.Dir(e.kubectl)+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	t.Logf("getting-started.md §2, as written:\n%s", out)
	if err != nil {
		t.Fatalf("the commands failed: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	defer e.diagnoseOnFailure(t)
	pods := e.readyPods(ctx, t, "kollect-system", "app.kubernetes.io/instance=kollect-agent", 1)
	if img := pods[0].Spec.Containers[0].Image; img != "ghcr.io/kollect-dev/agent:"+appVersion[1] {
		t.Errorf("the agent runs %s, not the chart's default image", img)
	}
	// What the page says to expect: the team's objects, accepted under the platform team's
	// scope, and the profile compiled by the agent.
	eventually(ctx, t, "the profile of deployments-to-git.yaml compiled", func() error {
		out, err := e.kubectlErr("", "get", "kollectprofile", "-n", "team-a", "deployments", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		if err != nil || strings.TrimSpace(out) != "True" {
			return &notYet{out}
		}
		return nil
	})
	t.Logf("kubectl get kollect -n team-a:\n%s", e.kubectlRun(t, "get", "kollect", "-n", "team-a"))
	e.helmRun(t, "uninstall", "kollect-agent", "-n", "kollect-system", "--wait")
}

type notYet struct{ s string }

func (n *notYet) Error() string { return "not yet: " + n.s }

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
