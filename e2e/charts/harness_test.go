package charts

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"kollect.dev/testenv"
)

// root is the repository root, from this package's directory.
var root = func() string {
	abs, err := filepath.Abs("../..")
	if err != nil {
		panic(err)
	}
	return abs
}()

// tool returns the path of a chart-test tool (helm, kubeconform, shellcheck).
func tool(t testing.TB, name string) string {
	t.Helper()
	p, err := testenv.Tool(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// run runs a command and returns its stdout; stderr is part of the error.
func run(dir, bin string, args ...string) (string, error) {
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	// Helm must not read or write the developer's own configuration and caches.
	home, _ := os.MkdirTemp("", "kollect-helm-home-")
	defer os.RemoveAll(home)
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\n%s%s", filepath.Base(bin), strings.Join(args, " "), err, errb.String(), out.String())
	}
	return out.String(), nil
}

// renderCase is one set of values for one chart.
type renderCase struct {
	name   string
	chart  string // agent or hub
	values string // YAML
	// check inspects the rendered objects; nil checks nothing beyond validation.
	check func(t *testing.T, objs []*unstructured.Unstructured)
}

const namespace = "kollect-system"

// render runs helm template and returns the manifest text.
func render(t testing.TB, c renderCase) (string, error) {
	t.Helper()
	vf := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(vf, []byte(c.values), 0o644); err != nil {
		t.Fatal(err)
	}
	return run(root, tool(t, "helm"), "template", "kollect-"+c.chart, filepath.Join("charts", c.chart),
		"--namespace", namespace, "--values", vf)
}

// decode splits a multi-document manifest into objects, failing on empty or kind-less documents.
func decode(t testing.TB, manifest string) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	for _, doc := range strings.Split(manifest, "\n---") {
		doc = strings.TrimSpace(strings.TrimPrefix(doc, "---"))
		var nonComment []string
		for _, l := range strings.Split(doc, "\n") {
			if !strings.HasPrefix(strings.TrimSpace(l), "#") && strings.TrimSpace(l) != "" {
				nonComment = append(nonComment, l)
			}
		}
		if len(nonComment) == 0 {
			continue
		}
		m := map[string]any{}
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatalf("rendered document does not parse: %v\n%s", err, doc)
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetKind() == "" || u.GetAPIVersion() == "" || u.GetName() == "" {
			t.Fatalf("rendered document without kind, apiVersion or name:\n%s", doc)
		}
		objs = append(objs, u)
	}
	return objs
}

// find returns the objects of a kind; name "" matches every name.
func find(objs []*unstructured.Unstructured, kind, name string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind && (name == "" || o.GetName() == name) {
			out = append(out, o)
		}
	}
	return out
}

// one returns the single object of a kind, failing otherwise.
func one(t *testing.T, objs []*unstructured.Unstructured, kind string) *unstructured.Unstructured {
	t.Helper()
	got := find(objs, kind, "")
	if len(got) != 1 {
		t.Fatalf("want one %s, got %d", kind, len(got))
	}
	return got[0]
}

// args returns the container args of the Deployment's first container.
func args(t *testing.T, objs []*unstructured.Unstructured) []string {
	t.Helper()
	d := one(t, objs, "Deployment")
	cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	if len(cs) == 0 {
		t.Fatal("Deployment without containers")
	}
	raw, _ := cs[0].(map[string]any)["args"].([]any)
	out := make([]string, len(raw))
	for i, a := range raw {
		out[i] = fmt.Sprint(a)
	}
	return out
}

func hasArg(t *testing.T, objs []*unstructured.Unstructured, want string) {
	t.Helper()
	for _, a := range args(t, objs) {
		if a == want {
			return
		}
	}
	t.Errorf("agent args lack %q: %v", want, args(t, objs))
}

func lacksArgPrefix(t *testing.T, objs []*unstructured.Unstructured, prefix string) {
	t.Helper()
	for _, a := range args(t, objs) {
		if strings.HasPrefix(a, prefix) {
			t.Errorf("unexpected arg %q", a)
		}
	}
}
