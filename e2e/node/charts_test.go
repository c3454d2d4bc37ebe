package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/testenv"
)

// hubInstall is what an installed hub gives the agents: where it is and how to trust it.
type hubInstall struct {
	serviceIP   string // the hub Service's ClusterIP, in the certificate's hosts
	podIP       string // the pod behind it, reachable from the host
	caPEM       []byte
	fingerprint string
	adminToken  string
}

// TestChartsAsPods installs charts/hub and charts/agent from the repository with the real helm
// on a real node, and checks what only pods show: readiness by the kubelet's own probes, the
// hardened security context holding, the webhook served from the pod through its Service, rows
// exported from the pod and read back with psql, a standby taking over when the leader pod is
// deleted, `helm upgrade` with a changed value, and `helm uninstall` leaving what the charts'
// READMEs say it leaves.
func TestChartsAsPods(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	hub := e.installHub(ctx, t, chart(t, "hub"), e.images["hub"].Tag)
	pods := e.installAgent(ctx, t, hub, agentRelease{chart: chart(t, "agent"), tag: e.images["agent"].Tag, replicas: 2})
	e.checkWebhook(t, pods)
	e.exportAndFailOver(ctx, t)
	e.upgradeAndUninstall(ctx, t)
}

// installHub installs a hub chart (SQLite on a hostPath volume) running image tag, then
// upgrades it with its Service's address in the certificate's hosts.
func (e *env) installHub(ctx context.Context, t *testing.T, chartDir, tag string, extra ...string) hubInstall {
	// The node has no storage provisioner: the claim the chart makes binds to a hostPath
	// volume made for it, owned by the hub's UID as a provisioner's volume would be.
	data := filepath.Join(t.TempDir(), "hub-data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(data, 65532, 65532); err != nil {
		t.Fatal(err)
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "kollect-hub-data"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			ClaimRef:                      &corev1.ObjectReference{Namespace: "kollect-hub", Name: "kollect-hub"},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: data}},
		},
	}
	if err := e.cluster.Client.Create(ctx, pv); err != nil {
		t.Fatal(err)
	}
	e.helmRun(t, append([]string{"install", "kollect-hub", chartDir, "-n", "kollect-hub", "--create-namespace",
		"--set", "image.repository=ghcr.io/kollect-dev/hub", "--set", "image.tag=" + tag, "--set", "image.pullPolicy=Never",
		"--wait", "--timeout", "4m"}, extra...)...)
	e.readyPods(ctx, t, "kollect-hub", "app.kubernetes.io/name=kollect-hub", 1)
	var svc corev1.Service
	if err := e.cluster.Client.Get(ctx, client.ObjectKey{Namespace: "kollect-hub", Name: "kollect-hub"}, &svc); err != nil {
		t.Fatal(err)
	}
	h := hubInstall{serviceIP: svc.Spec.ClusterIP}
	// Agents dial the Service's address, which must be in the hub's certificate: a changed
	// value, applied with helm upgrade, rolls the pod.
	e.helmRun(t, "upgrade", "kollect-hub", chartDir, "-n", "kollect-hub", "--reuse-values",
		"--set", "tls.hosts={"+h.serviceIP+"}", "--wait", "--timeout", "4m")
	pods := e.readyPods(ctx, t, "kollect-hub", "app.kubernetes.io/name=kollect-hub", 1)
	h.podIP = pods[0].Status.PodIP
	if hosts := regexp.MustCompile(`--hosts=(\S*)`).FindStringSubmatch(strings.Join(pods[0].Spec.Containers[0].Args, " ")); hosts == nil ||
		!strings.Contains(","+hosts[1]+",", ","+h.serviceIP+",") {
		t.Fatalf("the upgraded hub pod's --hosts lacks %s: %v", h.serviceIP, pods[0].Spec.Containers[0].Args)
	}

	logs := e.kubectlRun(t, "logs", "-n", "kollect-hub", "deploy/kollect-hub")
	m := regexp.MustCompile(`Agents pin the hub CA: (sha256:[0-9a-f]+)`).FindStringSubmatch(logs)
	if m == nil {
		t.Fatalf("no CA fingerprint in the hub's log:\n%s", logs)
	}
	h.fingerprint = m[1]
	if chartDir == chart(t, "hub") {
		// As the chart's NOTES say: kubectl exec (through the API server to the kubelet and
		// containerd) runs the hub binary, the image's only program, to print the token.
		h.adminToken = strings.TrimSpace(e.kubectlRun(t, "exec", "-n", "kollect-hub", pods[0].Name, "--",
			"kollect-hub", "--data-dir=/var/lib/kollect-hub", "--print-admin-token"))
	} else {
		// An earlier release's hub has no --print-admin-token: read the file from its volume.
		token, err := os.ReadFile(filepath.Join(data, "admin-token"))
		if err != nil {
			t.Fatalf("the hub wrote no admin token into its volume: %v", err)
		}
		h.adminToken = strings.TrimSpace(string(token))
	}
	if !strings.HasPrefix(h.adminToken, "kat_") {
		t.Fatalf("kollect-hub --print-admin-token printed %q", h.adminToken)
	}
	// The CA the pod serves is the one it logged: what agents pin.
	h.caPEM = []byte(run(t, "curl", "-sfk", "https://"+h.podIP+":8443/ca.crt"))
	block, _ := pem.Decode(h.caPEM)
	if block == nil {
		t.Fatalf("the hub served no PEM CA: %q", h.caPEM)
	}
	sum := sha256.Sum256(block.Bytes)
	if got := "sha256:" + hex.EncodeToString(sum[:]); got != h.fingerprint {
		t.Fatalf("the hub serves CA %s but logged %s", got, h.fingerprint)
	}
	return h
}

// fleet calls FleetService over Connect's JSON protocol with curl, verifying the hub's
// certificate for its Service address while connecting to the pod (the host has no route to
// ClusterIPs).
func (e *env) fleet(t *testing.T, h hubInstall, method, body string) map[string]any {
	t.Helper()
	ca := filepath.Join(t.TempDir(), "hub-ca.crt")
	if err := os.WriteFile(ca, h.caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	out := run(t, "curl", "-sf", "--cacert", ca, "--connect-to", h.serviceIP+":443:"+h.podIP+":8443",
		"-H", "Content-Type: application/json", "-H", "Authorization: Bearer "+h.adminToken,
		"https://"+h.serviceIP+"/kollect.fleet.v1.FleetService/"+method, "-d", body)
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%s: %v: %s", method, err, out)
	}
	return v
}

// agentRelease is one install of an agent chart.
type agentRelease struct {
	chart, tag string
	name       string // release name; default kollect-agent
	namespace  string // default kollect-system
	cluster    string // default node-1
	team       string // the namespace that holds its Kollect objects and sink Secrets; default team-a
	watchTeam  bool   // watch the team's namespace only (watchNamespaces), as another cluster would be
	replicas   int
	extra      []string
}

func (r agentRelease) withDefaults() agentRelease {
	if r.name == "" {
		r.name = "kollect-agent"
	}
	if r.namespace == "" {
		r.namespace = "kollect-system"
	}
	if r.cluster == "" {
		r.cluster = "node-1"
	}
	if r.team == "" {
		r.team = "team-a"
	}
	return r
}

// installAgent installs an agent chart joined to the hub and waits for its pods to be Ready
// and its cluster to be registered.
func (e *env) installAgent(ctx context.Context, t *testing.T, h hubInstall, r agentRelease) []corev1.Pod {
	r = r.withDefaults()
	token := e.fleet(t, h, "CreateBootstrapToken", `{"description":"node e2e","ttl":"3600s","maxUses":"2"}`)["secret"].(string)
	_, _ = e.kubectlErr("", "create", "namespace", r.team)
	args := []string{"install", r.name, r.chart, "-n", r.namespace, "--create-namespace",
		"--set", "image.repository=ghcr.io/kollect-dev/agent", "--set", "image.tag=" + r.tag, "--set", "image.pullPolicy=Never",
		"--set", "clusterName=" + r.cluster, "--set", fmt.Sprintf("replicas=%d", r.replicas), "--set", "tenantMode=false",
		"--set", "rbac.sinkNamespaces={" + r.team + "}", "--set", "resources.limits.memory=200Mi",
		"--set", "hub.url=https://" + h.serviceIP, "--set", "hub.caFingerprint=" + h.fingerprint,
		"--set", "hub.bootstrapToken.token=" + token, "--wait", "--timeout", "4m"}
	if r.watchTeam {
		args = append(args, "--set", "watchNamespaces={"+r.team+"}")
	}
	began := time.Now()
	e.helmRun(t, append(args, r.extra...)...)
	pods := e.readyPods(ctx, t, r.namespace, "app.kubernetes.io/instance="+r.name, r.replicas)
	t.Logf("%s: helm install to %d pods Ready in %v", r.name, r.replicas, time.Since(began).Round(100*time.Millisecond))
	for _, p := range pods {
		c := p.Spec.Containers[0]
		if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s runs without a read-only root filesystem", p.Name)
		}
		if lim := c.Resources.Limits.Memory().Value(); lim != 200<<20 {
			t.Errorf("%s memory limit %d, want 200Mi", p.Name, lim)
		}
		// The Go runtime in the pod took its soft limit from the container's (GOMEMLIMIT from
		// the Downward API), read from the agent's own metrics.
		if got := metric(t, p.Status.PodIP, e.metricsToken(t, r.name), "go_gc_gomemlimit_bytes"); got != 200<<20 {
			t.Errorf("%s runs with GOMEMLIMIT %v bytes, want the 200Mi limit", p.Name, got)
		}
	}
	// The agent registered with the hub from inside the cluster, through the hub's Service.
	eventually(ctx, t, "the agent registers with the hub", func() error {
		if _, err := e.hubCluster(t, h, r.cluster); err != nil {
			return err
		}
		return nil
	})
	return pods
}

// hubCluster is the hub's view of one cluster (ListClusters, as JSON).
func (e *env) hubCluster(t *testing.T, h hubInstall, name string) (map[string]any, error) {
	t.Helper()
	list, _ := e.fleet(t, h, "ListClusters", `{}`)["clusters"].([]any)
	for _, c := range list {
		if m, ok := c.(map[string]any); ok && m["name"] == name {
			return m, nil
		}
	}
	return nil, fmt.Errorf("the hub lists no cluster %s", name)
}

// checkWebhook: a profile whose CEL does not compile passes the schema; only the webhook,
// served from the pod and reached through its Service, refuses it.
func (e *env) checkWebhook(t *testing.T, pods []corev1.Pod) {
	bad := `apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: broken, namespace: team-a}
spec:
  target: {group: apps, version: v1, kind: Deployment}
  attributes:
    - {name: x, cel: "object.metadata.name +", type: string}
`
	before := e.webhookRequests(t, pods)
	out, err := e.kubectlErr(bad, "apply", "-f", "-")
	if err == nil || !strings.Contains(out, "spec.attributes[0].cel") {
		t.Fatalf("a profile that does not compile was not refused: %v\n%s", err, out)
	}
	// The agents' own counters show that a pod's webhook answered it.
	if after := e.webhookRequests(t, pods); after <= before {
		t.Fatalf("the agents' webhook request counters did not move (%v → %v): the refusal came from elsewhere", before, after)
	}
}

// metricsToken returns a token the agent release's metrics (metrics.secure, the chart's
// default) accept: a ServiceAccount's, bound to the release's metrics-reader ClusterRole as a
// user binds Prometheus's, once the API server's authorizer answers yes for it. A release of a
// chart from before metrics.secure has no such role and serves plain HTTP: "" then.
func (e *env) metricsToken(t *testing.T, release string) string {
	t.Helper()
	var reader string
	for _, n := range strings.Fields(e.kubectlRun(t, "get", "clusterrole", "-l", "app.kubernetes.io/instance="+release, "-o", "name")) {
		if strings.HasSuffix(n, "-metrics-reader") {
			reader = strings.TrimPrefix(n, "clusterrole.rbac.authorization.k8s.io/")
		}
	}
	if reader == "" {
		return ""
	}
	sa := "scraper-" + release
	_, _ = e.kubectlErr("", "create", "serviceaccount", sa, "-n", "default")
	_, _ = e.kubectlErr("", "create", "clusterrolebinding", sa, "--clusterrole", reader, "--serviceaccount", "default:"+sa)
	deadline := time.Now().Add(time.Minute)
	for {
		out, _ := e.kubectlErr("", "auth", "can-i", "get", "/metrics", "--as", "system:serviceaccount:default:"+sa)
		if strings.TrimSpace(out) == "yes" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s may not get /metrics: %s", sa, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return strings.TrimSpace(e.kubectlRun(t, "create", "token", sa, "-n", "default"))
}

// scrape reads an agent pod's metrics with curl: over TLS with the agent's generated
// certificate, sending token, or in plain HTTP without one (a release from before
// metrics.secure).
func scrape(t *testing.T, podIP, token string) string {
	t.Helper()
	if token == "" {
		return run(t, "curl", "-sf", "http://"+podIP+":8080/metrics")
	}
	return run(t, "curl", "-sfk", "-H", "Authorization: Bearer "+token, "https://"+podIP+":8080/metrics")
}

// metric reads one unlabelled sample from an agent pod's metrics.
func metric(t *testing.T, podIP, token, name string) float64 {
	t.Helper()
	for _, line := range strings.Split(scrape(t, podIP, token), "\n") {
		if strings.HasPrefix(line, name+" ") {
			var v float64
			if _, err := fmt.Sscan(strings.TrimPrefix(line, name+" "), &v); err == nil {
				return v
			}
		}
	}
	t.Fatalf("%s serves no %s", podIP, name)
	return 0
}

// webhookRequests sums controller-runtime's count of KollectProfile webhook requests over the
// agent pods, read from each pod's metrics port.
func (e *env) webhookRequests(t *testing.T, pods []corev1.Pod) float64 {
	t.Helper()
	total := 0.0
	token := e.metricsToken(t, "kollect-agent")
	for _, p := range pods {
		body := scrape(t, p.Status.PodIP, token)
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, "controller_runtime_webhook_requests_total{") && strings.Contains(line, "kollectprofile") {
				var v float64
				if _, err := fmt.Sscan(line[strings.LastIndex(line, " ")+1:], &v); err == nil {
					total += v
				}
			}
		}
	}
	return total
}

// leader is the pod holding the agent's Lease.
func (e *env) leader(ctx context.Context, t *testing.T) string {
	t.Helper()
	var lease coordinationv1.Lease
	if err := e.cluster.Client.Get(ctx, client.ObjectKey{Namespace: "kollect-system", Name: "kollect-agent"}, &lease); err != nil {
		t.Fatal(err)
	}
	if lease.Spec.HolderIdentity == nil {
		t.Fatal("the agent's Lease has no holder")
	}
	id, _, _ := strings.Cut(*lease.Spec.HolderIdentity, "_")
	return id
}

func chart(t *testing.T, name string) string {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "charts", name)
}
