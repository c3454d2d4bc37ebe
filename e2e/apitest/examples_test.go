package apitest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/testenv"
)

// examplesDir holds the YAML examples the documentation shows; every one must be accepted.
const examplesDir = "../../docs/examples"

// readObjects decodes every document of a multi-document YAML file.
func readObjects(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			t.Fatalf("%s: %v", path, err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

func createNamespace(t *testing.T, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := cp.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
}

func TestExamplesAreAccepted(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(examplesDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples under %s: %v", examplesDir, err)
	}
	createNamespace(t, "examples")
	createNamespace(t, "kollect-system")
	createNamespace(t, "kollect-demo")
	createNamespace(t, "kollect-fleet") // where hub bundles land (preview-bundle.yaml)
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			for _, obj := range readObjects(t, file) {
				if obj.GetNamespace() == "" && isNamespaced(obj.GetKind()) {
					obj.SetNamespace("examples")
				}
				if err := cp.Client.Create(context.Background(), obj); err != nil {
					t.Errorf("%s %s refused: %v", obj.GetKind(), obj.GetName(), err)
				}
			}
		})
	}
}

func isNamespaced(kind string) bool {
	return !strings.Contains(kind, "Cluster")
}

// TestKubectlGetKollect lists every Kollect kind through the `kollect` category, with the
// kubectl built at the apiserver's version.
func TestKubectlGetKollect(t *testing.T) {
	ns := "category"
	createNamespace(t, ns)
	for _, file := range []string{"deployments-to-git.yaml", "object-stores.yaml", "databases.yaml", "events.yaml", "cluster-wide.yaml"} {
		for _, obj := range readObjects(t, filepath.Join(examplesDir, file)) {
			if isNamespaced(obj.GetKind()) {
				obj.SetNamespace(ns)
			} else {
				obj.SetName("category-" + obj.GetName())
			}
			if err := cp.Client.Create(context.Background(), obj); err != nil {
				t.Fatalf("%s %s: %v", obj.GetKind(), obj.GetName(), err)
			}
		}
	}
	assets, err := testenv.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	cmd := exec.Command(filepath.Join(assets, "kubectl"), "--kubeconfig", cp.Kubeconfig, "get", "kollect", "-n", ns, "-o", "name")
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl get kollect: %v\n%s", err, errOut.String())
	}
	for _, want := range []string{
		"kollectprofile.kollect.dev/deployments",
		"kollecttarget.kollect.dev/services",
		"kollectinventory.kollect.dev/workloads",
		"kollectsnapshotsink.kollect.dev/s3-archive",
		"kollectdatabasesink.kollect.dev/fleet-postgres",
		"kollecteventsink.kollect.dev/kafka-changes",
		"kollectscope.kollect.dev/team-a",
		"kollectclustertarget.kollect.dev/category-nodes",
		"kollectclusterinventory.kollect.dev/category-platform",
		"kollectclusterscope.kollect.dev/category-platform-ceiling",
	} {
		if !strings.Contains(out.String(), want+"\n") {
			t.Errorf("kubectl get kollect lacks %s; got:\n%s", want, out.String())
		}
	}
}

// TestDefaultsApplied checks the schema defaults a user relies on without writing them.
func TestDefaultsApplied(t *testing.T) {
	createNamespace(t, "defaults")
	obj := mustParse(t, `
apiVersion: kollect.dev/v1alpha1
kind: KollectInventory
metadata: {name: defaults, namespace: defaults}
spec:
  targets: [{name: a}]
`)
	if err := cp.Client.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(obj.GroupVersionKind())
	if err := cp.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), got); err != nil {
		t.Fatal(err)
	}
	for field, want := range map[string]string{"debounce": "5s", "maxDelay": "1m"} {
		if v, _, _ := unstructured.NestedString(got.Object, "spec", field); v != want {
			t.Errorf("spec.%s = %q, want default %q", field, v, want)
		}
	}
}

// TestKubectlExplainHistory: kubectl explain, against the served CRD, describes the postgres
// sink's history field with its table and function.
func TestKubectlExplainHistory(t *testing.T) {
	assets, err := testenv.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	cmd := exec.Command(filepath.Join(assets, "kubectl"), "--kubeconfig", cp.Kubeconfig, "explain", "kollectdatabasesinks.spec.postgres.history")
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl explain: %v\n%s", err, errOut.String())
	}
	// kubectl wraps the description: compare without line breaks.
	text := strings.Join(strings.Fields(out.String()), " ")
	for _, want := range []string{"<boolean>", "History keeps every version of every row", "<table>_history", "<schema>.<table>_as_of(timestamptz)", "kollect query --as-of"} {
		if !strings.Contains(text, want) {
			t.Errorf("kubectl explain of spec.postgres.history lacks %q:\n%s", want, out.String())
		}
	}
}
