package charts

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/e2e/testenv"
)

// agentConfig is what testAgentRuns applies as the administrator: a profile, a cluster target,
// a git sink and a cluster inventory, as in the fleet scenario.
const agentConfig = `apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: configmaps, namespace: kollect-system}
spec:
  target: {version: v1, kind: ConfigMap}
  attributes:
    - {name: color, jsonPath: "{.data.color}", optional: true}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectClusterTarget
metadata: {name: configmaps}
spec:
  profileRef: {name: configmaps, namespace: kollect-system}
  labelSelector: {matchLabels: {inventory: charts}}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectSnapshotSink
metadata: {name: repo, namespace: kollect-system}
spec:
  type: git
  git: {url: "file://%s"}
  layout: {mode: document}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectClusterInventory
metadata: {name: charts}
spec:
  targets: [{name: configmaps}]
  sinks:
    snapshot: [{name: repo, namespace: kollect-system}]
  debounce: 1s
  maxDelay: 5s
---
apiVersion: v1
kind: ConfigMap
metadata: {name: red, namespace: team-a, labels: {inventory: charts}}
data: {color: red}
`

// testAgentRuns runs the real kollect-agent with the arguments of the chart's Deployment, as
// the chart's ServiceAccount (its RBAC installed by testRBAC), and waits for an export: the
// least-privilege RBAC must also be enough. Only what needs a kubelet differs: ports, and
// directories instead of the pod's volumes.
func testAgentRuns(t *testing.T, cp *testenv.ControlPlane, kubectl string, objs []*unstructured.Unstructured) {
	bin := binary(t, "kollect-agent")
	sa := "system:serviceaccount:" + namespace + ":kollect-agent"
	cfg, err := cp.AddUser(sa, "system:serviceaccounts", "system:serviceaccounts:"+namespace)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	b64 := base64.StdEncoding.EncodeToString
	if err := os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, certificate-authority-data: %s}}]
users: [{name: u, user: {client-certificate-data: %s, client-key-data: %s}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, cfg.Host, b64(cfg.CAData), b64(cfg.CertData), b64(cfg.KeyData))), 0o600); err != nil {
		t.Fatal(err)
	}
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	metricsPort, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	var agentArgs []string
	for _, a := range args(t, objs) {
		name, _, _ := strings.Cut(a, "=")
		switch name {
		case "--hub-url", "--hub-ca-fingerprint", "--hub-namespaces", "--hub-bootstrap-secret", "--hub-credential-secret", "--cluster-labels":
			// No hub runs here (e2e/fleet covers the hub); the RBAC for it was checked above.
		case "--metrics-bind-address":
			agentArgs = append(agentArgs, fmt.Sprintf("%s=127.0.0.1:%d", name, metricsPort))
		case "--health-probe-bind-address":
			agentArgs = append(agentArgs, name+"=0")
		case "--cache-dir":
			agentArgs = append(agentArgs, name+"="+filepath.Join(dir, "cache"))
		case "--webhook-cert-dir":
			agentArgs = append(agentArgs, name+"="+filepath.Join(dir, "certs"))
		case "--webhook-port":
			agentArgs = append(agentArgs, fmt.Sprintf("%s=%d", name, port))
		default:
			agentArgs = append(agentArgs, a)
		}
	}
	logPath := filepath.Join(dir, "agent.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, agentArgs...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "POD_NAMESPACE="+namespace)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			raw, _ := os.ReadFile(logPath)
			t.Logf("agent log:\n%s", raw)
		}
	})

	repo, err := testenv.InitBareRepo(filepath.Join(dir, "repo.git"))
	if err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgFile, []byte(fmt.Sprintf(agentConfig, repo)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := run(root, kubectl, "--kubeconfig", cp.Kubeconfig, "apply", "-f", cfgFile); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	ctx := context.Background()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, _ := exec.Command("git", "--git-dir", repo, "show", "main:prod-eu-1/charts.yaml").CombinedOutput()
		if strings.Contains(string(out), "color: red") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no export from the agent running with the chart's RBAC:\n%s", out)
		}
		select {
		case err := <-exited:
			exited <- err // for the cleanup
			t.Fatalf("the agent exited: %v", err)
		case <-time.After(500 * time.Millisecond):
		}
	}
	// The self-managed webhook certificate: created in the release namespace with the chart's
	// create permission on Secrets.
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "kollect-agent-webhook-tls"}, &corev1.Secret{}); err != nil {
		t.Errorf("webhook certificate Secret: %v", err)
	}
	// The series the chart's PrometheusRule alerts on, with the labels it matches on (the error
	// counter has no series before a first error).
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort))
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), `kollect_export_last_success_timestamp_seconds{inventory="charts",sink="`) {
		t.Errorf("metrics lack kollect_export_last_success_timestamp_seconds by inventory and sink:\n%s", metrics)
	}
	raw, _ := os.ReadFile(logPath)
	if strings.Contains(strings.ToLower(string(raw)), "forbidden") {
		t.Errorf("the agent was refused something with the chart's RBAC:\n%s", raw)
	}
}
