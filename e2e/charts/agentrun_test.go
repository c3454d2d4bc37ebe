package charts

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"
	"kollect.dev/testenv"
)

// localConfig is applied by the administrator for the standalone run: a profile, a cluster
// target, a git sink and a cluster inventory, as in the fleet scenario.
const localConfig = `apiVersion: kollect.dev/v1alpha1
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

// hubBundle is what the hub distributes in the hub run: namespaced objects in team-a, one of
// the chart's hub.namespaces (the allowlist) and sink namespaces.
const hubBundle = `apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: hub-configmaps, namespace: team-a}
spec:
  target: {version: v1, kind: ConfigMap}
  attributes:
    - {name: color, jsonPath: "{.data.color}", optional: true}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectClusterTarget
metadata: {name: hub-configmaps}
spec:
  profileRef: {name: hub-configmaps, namespace: team-a}
  labelSelector: {matchLabels: {inventory: charts}}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectSnapshotSink
metadata: {name: hub-repo, namespace: team-a}
spec:
  type: git
  git: {url: "file://%s"}
  layout: {mode: document}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectClusterInventory
metadata: {name: hub}
spec:
  targets: [{name: hub-configmaps}]
  sinks:
    snapshot: [{name: hub-repo, namespace: team-a}]
  debounce: 1s
  maxDelay: 5s
`

// testAgentRuns runs the real kollect-agent with the arguments of the chart's Deployment, as
// the chart's ServiceAccount (its RBAC installed by testRBAC): first standalone, configured by
// objects in the cluster, then registered with a real hub that distributes the configuration.
// Each run must export; the least-privilege RBAC must also be enough. Only what needs a
// kubelet differs: ports, and directories instead of the pod's volumes.
func testAgentRuns(t *testing.T, cp *testenv.ControlPlane, kubectl string, objs []*unstructured.Unstructured) {
	ctx := context.Background()
	kubeconfig := serviceAccountKubeconfig(t, cp)
	dir := t.TempDir()
	repo, err := testenv.InitBareRepo(filepath.Join(dir, "repo.git"))
	if err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgFile, []byte(fmt.Sprintf(localConfig, repo)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := run(root, kubectl, "--kubeconfig", cp.Kubeconfig, "apply", "-f", cfgFile); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}

	// Standalone.
	agentArgs, metricsPort := chartAgentArgs(t, objs, dir, "", "")
	agent := start(t, "agent", binary(t, "kollect-agent"), []string{"KUBECONFIG=" + kubeconfig, "POD_NAMESPACE=" + namespace}, agentArgs...)
	waitFor(t, agent, 2*time.Minute, "an export from the standalone agent", func() (bool, string) {
		out, _ := exec.Command("git", "--git-dir", repo, "show", "main:prod-eu-1/charts.yaml").CombinedOutput()
		return strings.Contains(string(out), "color: red"), string(out)
	})
	// The self-managed webhook certificate: created in the release namespace with the chart's
	// create permission on Secrets.
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "kollect-agent-webhook-tls"}, &corev1.Secret{}); err != nil {
		t.Errorf("webhook certificate Secret: %v", err)
	}
	// The series the chart's PrometheusRule alerts on, with the labels it matches on (the error
	// counter has no series before a first error), read as a scraper would: metrics.secure
	// serves them over TLS only to a caller the API server authenticates and lets get /metrics.
	metrics := scrapeSecureMetrics(t, cp, kubectl, objs, metricsPort)
	if !strings.Contains(metrics, `kollect_export_last_success_timestamp_seconds{inventory="charts",sink="`) {
		t.Errorf("metrics lack kollect_export_last_success_timestamp_seconds by inventory and sink:\n%s", metrics)
	}
	agent.stop()
	if strings.Contains(strings.ToLower(agent.output()), "forbidden") {
		t.Fatalf("the standalone agent was refused something with the chart's RBAC:\n%s", agent.output())
	}

	// With a hub: registration (bootstrap Secret read, credential Secret written) and bundle
	// objects applied in the allowlisted namespace and cluster-wide.
	hubURL, fingerprint, fleet := startLocalHub(t, dir)
	tok, err := fleet.CreateBootstrapToken(ctx, connect.NewRequest(&fleetv1.CreateBootstrapTokenRequest{
		Description: "charts", Ttl: durationpb.New(time.Hour), MaxUses: 1}))
	if err != nil {
		t.Fatal(err)
	}
	// The Secret the chart renders from hub.bootstrapToken.token, with a real token.
	if err := cp.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "kollect-agent-hub-bootstrap"},
		StringData: map[string]string{"token": tok.Msg.GetSecret()}}); err != nil {
		t.Fatal(err)
	}
	agentArgs, _ = chartAgentArgs(t, objs, dir, hubURL, fingerprint)
	agent = start(t, "agent-hub", binary(t, "kollect-agent"), []string{"KUBECONFIG=" + kubeconfig, "POD_NAMESPACE=" + namespace}, agentArgs...)
	waitFor(t, agent, time.Minute, "the agent registered", func() (bool, string) {
		l, err := fleet.ListClusters(ctx, connect.NewRequest(&fleetv1.ListClustersRequest{}))
		if err != nil {
			return false, err.Error()
		}
		return len(l.Msg.GetClusters()) == 1, l.Msg.String()
	})
	if _, err := fleet.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{Name: "charts",
		Manifests:       fmt.Sprintf(hubBundle, repo),
		ClusterSelector: &fleetv1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}})); err != nil {
		t.Fatal(err)
	}
	waitFor(t, agent, 2*time.Minute, "an export configured by the hub", func() (bool, string) {
		out, _ := exec.Command("git", "--git-dir", repo, "show", "main:prod-eu-1/hub.yaml").CombinedOutput()
		return strings.Contains(string(out), "color: red"), string(out)
	})
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "kollect-hub-credential"}, &corev1.Secret{}); err != nil {
		t.Errorf("hub credential Secret: %v", err)
	}
	if strings.Contains(strings.ToLower(agent.output()), "forbidden") {
		t.Errorf("the agent was refused something with the chart's RBAC:\n%s", agent.output())
	}
}

// serviceAccountKubeconfig writes a kubeconfig acting as the chart's ServiceAccount.
func serviceAccountKubeconfig(t *testing.T, cp *testenv.ControlPlane) string {
	cfg, err := cp.AddUser("system:serviceaccount:"+namespace+":kollect-agent", "system:serviceaccounts", "system:serviceaccounts:"+namespace)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	b64 := base64.StdEncoding.EncodeToString
	if err := os.WriteFile(path, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, certificate-authority-data: %s}}]
users: [{name: u, user: {client-certificate-data: %s, client-key-data: %s}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, cfg.Host, b64(cfg.CAData), b64(cfg.CertData), b64(cfg.KeyData))), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// chartAgentArgs adapts the chart Deployment's agent arguments to a process on this machine:
// local ports and directories; without hubURL the hub flags are dropped, with it the hub's
// address and CA pin replace the case's.
func chartAgentArgs(t *testing.T, objs []*unstructured.Unstructured, dir, hubURL, fingerprint string) ([]string, int) {
	metricsPort, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	webhookPort, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range args(t, objs) {
		name, _, _ := strings.Cut(a, "=")
		switch {
		case strings.HasPrefix(name, "--hub-") && hubURL == "":
		case name == "--hub-url":
			out = append(out, name+"="+hubURL)
		case name == "--hub-ca-fingerprint":
			out = append(out, name+"="+fingerprint)
		case name == "--metrics-bind-address":
			out = append(out, fmt.Sprintf("%s=127.0.0.1:%d", name, metricsPort))
		case name == "--health-probe-bind-address":
			out = append(out, name+"=0")
		case name == "--webhook-port":
			out = append(out, fmt.Sprintf("%s=%d", name, webhookPort))
		case name == "--cache-dir":
			out = append(out, name+"="+filepath.Join(dir, "cache"))
		case name == "--webhook-cert-dir":
			out = append(out, name+"="+filepath.Join(dir, "certs"))
		default:
			out = append(out, a)
		}
	}
	return out, metricsPort
}

// startLocalHub runs kollect-hub on loopback and returns its URL, its CA fingerprint and an
// admin FleetService client.
func startLocalHub(t *testing.T, dir string) (string, string, fleetv1connect.FleetServiceClient) {
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "hub-data")
	hub := start(t, "hub", binary(t, "kollect-hub"), nil, fmt.Sprintf("--listen=127.0.0.1:%d", port),
		"--data-dir="+data, "--hosts=127.0.0.1", "--heartbeat-interval=1s")
	var caPEM, token []byte
	waitFor(t, hub, time.Minute, "the hub's CA and admin token", func() (bool, string) {
		caPEM, _ = os.ReadFile(filepath.Join(data, "pki", "ca.crt"))
		token, _ = os.ReadFile(filepath.Join(data, "admin-token"))
		return len(caPEM) > 0 && len(token) > 0, ""
	})
	block, _ := pem.Decode(caPEM)
	if block == nil {
		t.Fatalf("hub CA is not PEM: %s", caPEM)
	}
	sum := sha256.Sum256(block.Bytes)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	auth := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
			return next(ctx, req)
		}
	})
	url := fmt.Sprintf("https://127.0.0.1:%d", port)
	fleet := fleetv1connect.NewFleetServiceClient(hc, url, connect.WithInterceptors(auth))
	waitFor(t, hub, time.Minute, "the hub serving", func() (bool, string) {
		_, err := fleet.ListClusters(context.Background(), connect.NewRequest(&fleetv1.ListClustersRequest{}))
		return err == nil, fmt.Sprint(err)
	})
	return url, "sha256:" + hex.EncodeToString(sum[:]), fleet
}

// waitFor polls cond until it holds, failing after timeout or when p exits.
func waitFor(t *testing.T, p *proc, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, last := cond()
		if ok {
			return
		}
		p.alive(t)
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, last)
		}
		time.Sleep(300 * time.Millisecond)
	}
}
