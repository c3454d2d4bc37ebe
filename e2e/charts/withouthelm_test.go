package charts

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/testenv"
)

// rbacExample is the RBAC docs/hub.md gives an agent run without Helm.
const rbacExample = "docs/examples/agent-rbac.yaml"

// fleetBundle is a bundle for the kollect-fleet namespace, as a hub operator writes it.
const fleetBundle = `apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: fleet-configmaps, namespace: kollect-fleet}
spec:
  target: {version: v1, kind: ConfigMap}
  attributes: [{name: color, jsonPath: "{.data.color}", optional: true}]
---
apiVersion: kollect.dev/v1alpha1
kind: KollectTarget
metadata: {name: fleet-configmaps, namespace: kollect-fleet}
spec: {profileRef: {name: fleet-configmaps}}
`

// TestAgentRBACExampleIsTheCharts: docs/examples/agent-rbac.yaml is what
// hack/generate-agent-rbac.sh renders from the chart today.
func TestAgentRBACExampleIsTheCharts(t *testing.T) {
	fresh := filepath.Join(t.TempDir(), "agent-rbac.yaml")
	if out, err := run(root, filepath.Join(root, "hack", "generate-agent-rbac.sh"), fresh); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want, err := os.ReadFile(fresh)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, rbacExample))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("%s is stale: run hack/generate-agent-rbac.sh (or make generate)", rbacExample)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "hub.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "kubectl apply -f "+rbacExample) {
		t.Errorf("docs/hub.md does not tell users to apply %s", rbacExample)
	}
}

// TestJoinWithoutHelm follows docs/hub.md "Joining a hub without Helm" with the shipped
// binaries: the example RBAC applied with kubectl, the bootstrap Secret, and kollect-agent
// run as the example's ServiceAccount with the documented flags. First the agent's Role in
// kollect-fleet lacks patch (as the RBAC the docs gave before): the bundle's profile is not
// applied, the agent logs why, and `kollect hub clusters` (table and --json) shows the API
// server's reason for that cluster. Then the documented RBAC is applied again: the same agent
// process applies the profile, with no new revision, and the cluster is in sync.
func TestJoinWithoutHelm(t *testing.T) {
	t.Parallel() // its own control plane, servers and ports
	ctx := context.Background()
	assets, err := testenv.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(assets, "kubectl")
	cp, err := testenv.Start("charts-without-helm", testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	kc := func(args ...string) string {
		t.Helper()
		out, err := run(root, kubectl, append([]string{"--kubeconfig", cp.Kubeconfig}, args...)...)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return out
	}
	kc("create", "namespace", "kollect-system")
	kc("create", "namespace", "kollect-fleet")
	kc("apply", "-f", filepath.Join(root, rbacExample))
	// The Role as the docs used to leave it: no patch, which server-side apply needs.
	role := &rbacv1.Role{}
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "kollect-fleet", Name: "kollect-agent-hub-apply"}, role); err != nil {
		t.Fatal(err)
	}
	role.Rules[0].Verbs = []string{"create", "update", "delete"}
	if err := cp.Client.Update(ctx, role); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	hubURL, fingerprint, fleet := startLocalHub(t, dir)
	tok, err := fleet.CreateBootstrapToken(ctx, connect.NewRequest(&fleetv1.CreateBootstrapTokenRequest{
		Description: "cluster east", Ttl: durationpb.New(time.Hour), MaxUses: 1}))
	if err != nil {
		t.Fatal(err)
	}
	kc("-n", "kollect-system", "create", "secret", "generic", "kollect-hub-bootstrap", "--from-literal=token="+tok.Msg.GetSecret())

	// Step 4's command; only what a laptop needs differs (ports, the cache directory).
	kubeconfig := serviceAccountKubeconfig(t, cp)
	agent := start(t, "agent-without-helm", binary(t, "kollect-agent"), []string{"KUBECONFIG=" + kubeconfig},
		"--cluster-name", "east", "--cluster-labels", "env=prod,region=eu",
		"--hub-url", hubURL, "--hub-ca-fingerprint", fingerprint,
		"--pod-namespace", "kollect-system", "--hub-namespaces", "kollect-fleet",
		"--metrics-bind-address=0", "--health-probe-bind-address=0", "--cache-dir="+filepath.Join(dir, "cache"))

	cli := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(binary(t, "kollect"), args...)
		cmd.Env = append(os.Environ(), "KOLLECT_HUB_CONFIG="+filepath.Join(dir, "hub.json"))
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("kollect %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	adminToken, err := os.ReadFile(filepath.Join(dir, "hub-data", "admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	cli("hub", "login", "--url", hubURL, "--token", strings.TrimSpace(string(adminToken)), "--ca-fingerprint", fingerprint)
	waitFor(t, agent, time.Minute, "the agent registered", func() (bool, string) {
		out := cli("hub", "clusters")
		return strings.Contains(out, "east"), out
	})
	bundleFile := filepath.Join(dir, "bundle.yaml")
	if err := os.WriteFile(bundleFile, []byte(fleetBundle), 0o644); err != nil {
		t.Fatal(err)
	}
	cli("hub", "bundle", "apply", "fleet", "-f", bundleFile, "--selector", "env=prod")

	const reason = `cannot patch resource "kollectprofiles" in API group "kollect.dev" in the namespace "kollect-fleet"`
	type listing struct {
		Clusters []struct {
			Name         string `json:"name"`
			ConfigInSync bool   `json:"configInSync"`
			Bundles      []struct {
				Bundle          string `json:"bundle"`
				DesiredRevision string `json:"desiredRevision"`
				AppliedRevision string `json:"appliedRevision"`
			} `json:"bundles"`
		} `json:"clusters"`
		ObjectsNotApplied []struct {
			Cluster, Bundle, Result, Message string
			Object                           map[string]string
		} `json:"objectsNotApplied"`
	}
	clusters := func() listing {
		t.Helper()
		var l listing
		out := cli("hub", "clusters", "--json")
		if err := json.Unmarshal([]byte(out), &l); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return l
	}
	waitFor(t, agent, 2*time.Minute, "the refused profile with its reason in `kollect hub clusters --json`", func() (bool, string) {
		l := clusters()
		for _, o := range l.ObjectsNotApplied {
			if o.Cluster == "east" && o.Bundle == "fleet" && o.Object["name"] == "fleet-configmaps" &&
				o.Result == "APPLY_RESULT_FAILED" && strings.Contains(o.Message, reason) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", l)
	})
	if table := cli("hub", "clusters"); !strings.Contains(table, "Objects not applied:") || !strings.Contains(table, reason) {
		t.Errorf("`kollect hub clusters` does not say why the profile was not applied:\n%s", table)
	}
	if log := agent.output(); !strings.Contains(log, "hub object not applied") || !strings.Contains(log, `cannot patch resource \"kollectprofiles\"`) {
		t.Errorf("the agent did not log the refused write with its reason:\n%s", log)
	}
	profile := &unstructured.Unstructured{}
	profile.SetAPIVersion("kollect.dev/v1alpha1")
	profile.SetKind("KollectProfile")
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "kollect-fleet", Name: "fleet-configmaps"}, profile); err == nil {
		t.Fatal("the profile exists although the agent may not patch profiles")
	}

	// The documented RBAC, applied again: the running agent heals, with no new revision.
	kc("apply", "-f", filepath.Join(root, rbacExample))
	waitFor(t, agent, 2*time.Minute, "the profile applied after the RBAC fix, and the cluster in sync", func() (bool, string) {
		l := clusters()
		return len(l.ObjectsNotApplied) == 0 && len(l.Clusters) == 1 && l.Clusters[0].ConfigInSync, fmt.Sprintf("%+v", l)
	})
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "kollect-fleet", Name: "fleet-configmaps"}, profile); err != nil {
		t.Fatalf("the profile is not in the cluster after the RBAC fix: %v", err)
	}
	if rev := profile.GetAnnotations()["kollect.dev/bundle-revision"]; rev != "1" {
		t.Errorf("profile at revision %q, want 1 (no new revision was made)", rev)
	}
	for _, b := range clusters().Clusters[0].Bundles {
		if b.DesiredRevision != "1" || b.AppliedRevision != "1" {
			t.Errorf("bundle %s: desired %s, applied %s; want revision 1", b.Bundle, b.DesiredRevision, b.AppliedRevision)
		}
	}
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "kollect-system", Name: "kollect-hub-credential"}, &corev1.Secret{}); err != nil {
		t.Errorf("hub credential Secret: %v", err)
	}
	agent.alive(t) // the same process throughout: no restart
}
