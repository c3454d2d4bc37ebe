package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/testenv"
)

// fleetHubPort is service.nodePort in e2e/kind-fleet/hub-values.yaml: agents in every cluster
// dial the first cluster's node on it.
const fleetHubPort = 30443

// TestFleetScenario is e2e/kind-fleet/run.sh on real nodes: three clusters, each with its own
// control plane and node, joined as the clusters of one fleet are; charts/hub in the first
// (here two replicas on PostgreSQL behind one brought certificate, where the script runs one
// on SQLite), charts/agent in each with the script's values, registered with one bootstrap
// token; the script's bundle rolled out through the hub; every agent exporting to one shared
// PostgreSQL and one shared git repository, read back with psql and git. Then one hub replica
// is deleted and the other carries a new revision to every cluster, and a change in one
// cluster reaches both sinks for that cluster only.
func TestFleetScenario(t *testing.T) {
	tools, err := newTools()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	f := startFleet(t, tools, "kollect-1", "kollect-2", "kollect-3")
	f.installHub(ctx, t)
	token := f.call(t, "CreateBootstrapToken", `{"description":"fleet scenario","ttl":"3600s","maxUses":"3"}`)["secret"].(string)
	for i, m := range f.members {
		f.installAgent(ctx, t, m, token, fleetAgentValues[i]...)
	}
	eventually(ctx, t, "three registered clusters", func() error {
		if n := len(f.clusters(t)); n != 3 {
			return fmt.Errorf("%d clusters registered", n)
		}
		return nil
	})

	bundle := f.bundle(t, "1s")
	applied := f.call(t, "ApplyBundle", bundleRequest(t, bundle))
	if sel, _ := applied["selectedClusters"].([]any); len(sel) != 3 {
		t.Fatalf("the bundle did not select the three clusters: %v", applied)
	}
	f.waitApplied(ctx, t, "1")
	f.waitExports(ctx, t, map[string]int{"kollect-1": 2, "kollect-2": 2, "kollect-3": 2})
	for _, m := range f.members {
		doc := f.git(t, "show", "main:"+m.cluster.Name+"/fleet.yaml")
		if !strings.Contains(doc, "cluster: "+m.cluster.Name) || !strings.Contains(doc, "color: blue") {
			t.Fatalf("%s/fleet.yaml is not that cluster's two ConfigMaps:\n%s", m.cluster.Name, doc)
		}
	}
	f.waitHealthy(ctx, t)
	f.checkEgressAdmitted(t, f.members[2])

	// The hub is two replicas on one database: with one deleted, the other serves the API and
	// the agents' connections, and a new revision reaches every cluster.
	hubPods := f.members[0].readyPods(ctx, t, "kollect-hub", "app.kubernetes.io/name=kollect-hub", 2)
	f.members[0].kubectlRun(t, "delete", "pod", "-n", "kollect-hub", hubPods[0].Name, "--wait=false")
	began := time.Now()
	eventually(ctx, t, "a second revision through the remaining hub replica", func() error {
		out, err := f.callErr("ApplyBundle", bundleRequest(t, f.bundle(t, "2s")))
		if err != nil {
			return err
		}
		if rev, _ := out["revision"].(map[string]any); rev == nil || rev["revision"] != "2" {
			return fmt.Errorf("ApplyBundle answered %v", out)
		}
		return nil
	})
	f.waitApplied(ctx, t, "2")
	f.waitHealthy(ctx, t)
	t.Logf("one hub replica deleted to revision 2 applied on every cluster: %v", time.Since(began).Round(100*time.Millisecond))

	// A change in one cluster reaches both sinks, labelled with that cluster only.
	f.members[1].configMap(t, "green")
	f.waitExports(ctx, t, map[string]int{"kollect-1": 2, "kollect-2": 3, "kollect-3": 2})
	// PostgreSQL and git are separate sinks: the commit can follow the rows by a push.
	eventually(ctx, t, "kollect-2's green ConfigMap in git", func() error {
		if doc := f.git(t, "show", "main:kollect-2/fleet.yaml"); !strings.Contains(doc, "color: green") {
			return fmt.Errorf("kollect-2/fleet.yaml lacks the green ConfigMap:\n%s", doc)
		}
		return nil
	})
	for _, c := range []string{"kollect-1", "kollect-3"} {
		if doc := f.git(t, "show", "main:"+c+"/fleet.yaml"); strings.Contains(doc, "green") {
			t.Fatalf("%s/fleet.yaml has kollect-2's ConfigMap:\n%s", c, doc)
		}
	}
}

// fleetAgentValues are what each cluster adds to e2e/kind-fleet/agent-values.yaml, so that the
// chart values that change the pod spec run as pods: another probe port, another cache volume
// size, and the NetworkPolicy.
var fleetAgentValues = [][]string{
	nil,
	{"--set", "healthPort=8082", "--set", "cacheDir.sizeLimit=256Mi"},
	{"--set", "networkPolicy.enabled=true"},
}

// fleet is the scenario's clusters and the servers they share.
type fleet struct {
	members []*env // members[0] runs the hub
	pg      *testenv.Postgres
	repo    string // the shared bare git repository, mounted into every agent at /fleet.git
	hubURL  string
	caFile  string
	caPEM   []byte
	admin   string
}

// startFleet starts one node cluster per name side by side (the first with the hub's image
// too), joins their networks, and starts the shared PostgreSQL and git repository.
func startFleet(t *testing.T, tools *env, names ...string) *fleet {
	dir, err := testenv.Images()
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{members: make([]*env, len(names))}
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		archives := []string{filepath.Join(dir, "agent.tar")}
		if i == 0 {
			archives = append(archives, filepath.Join(dir, "hub.tar"))
		}
		m := *tools
		f.members[i] = &m
		wg.Add(1)
		go func() {
			defer wg.Done()
			begin := time.Now()
			m.cluster, errs[i] = testenv.StartNodeCluster(name, archives...)
			t.Logf("cluster %s Ready in %v", name, time.Since(begin).Round(100*time.Millisecond))
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, m := range f.members {
			if m.cluster != nil {
				if t.Failed() {
					t.Logf("cluster %s:\n%s", m.cluster.Name, m.clusterState())
				}
				m.cluster.Stop()
			}
		}
	})
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	clusters := make([]*testenv.NodeCluster, len(names))
	var trust []string
	for i, m := range f.members {
		clusters[i] = m.cluster
		trust = append(trust, m.cluster.PodCIDR())
	}
	if err := testenv.ConnectNodeClusters(clusters...); err != nil {
		t.Fatal(err)
	}
	// One PostgreSQL for the hub's store and the fleet's rows, on the first cluster's host
	// address: the other clusters' pods reach it through the joined networks.
	if f.pg, err = testenv.StartPostgresWith(testenv.PostgresOptions{
		ListenAddresses: []string{clusters[0].HostIP}, TrustNetworks: trust,
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.pg.Shutdown)
	for _, sql := range []string{"CREATE ROLE kollect LOGIN", "CREATE DATABASE inventory OWNER kollect",
		"CREATE ROLE kollect_hub LOGIN", "CREATE DATABASE hub OWNER kollect_hub"} {
		run(t, "psql", f.pg.URL, "-qc", sql)
	}

	// The repository is written by the agents' UID through a hostPath volume; the host
	// reads it with git.
	if f.repo, err = os.MkdirTemp("", "kollect-fleet-git-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(f.repo) })
	run(t, "git", "init", "-q", "--bare", "--initial-branch=main", f.repo)
	run(t, "chmod", "-R", "a+rwX", f.repo)
	return f
}

// installHub installs charts/hub in the first cluster with the script's values, as an HA
// hub: two replicas on the shared PostgreSQL, one certificate (for the node's address) from a
// kubernetes.io/tls Secret.
func (f *fleet) installHub(ctx context.Context, t *testing.T) {
	h := f.members[0]
	nodeIP := h.cluster.NodeIP
	caPEM, certFile, keyFile, err := testenv.ServerCertificateFor(t.TempDir(), nodeIP, "kollect-hub.kollect-hub.svc")
	if err != nil {
		t.Fatal(err)
	}
	h.kubectlRun(t, "create", "namespace", "kollect-hub")
	h.kubectlRun(t, "create", "secret", "tls", "hub-tls", "-n", "kollect-hub", "--cert", certFile, "--key", keyFile)
	h.kubectlRun(t, "create", "secret", "generic", "hub-db", "-n", "kollect-hub", "--from-literal=dsn="+
		fmt.Sprintf("postgres://kollect_hub@%s:%d/hub?sslmode=disable", h.cluster.HostIP, f.pg.Port))
	began := time.Now()
	h.helmRun(t, "install", "kollect-hub", chart(t, "hub"), "-n", "kollect-hub",
		"--values", kindFleetFile(t, "hub-values.yaml"), "--set", "image.tag="+h.images["hub"].Tag,
		"--set", "replicas=2", "--set", "store.type=postgres", "--set", "store.postgres.existingSecret=hub-db",
		"--set", "persistence.enabled=false", "--set", "tls.existingSecret=hub-tls", "--wait", "--timeout", "4m")
	pods := h.readyPods(ctx, t, "kollect-hub", "app.kubernetes.io/name=kollect-hub", 2)
	t.Logf("helm install of the hub to 2 replicas Ready in %v", time.Since(began).Round(100*time.Millisecond))
	h.kubectlRun(t, "get", "poddisruptionbudget", "-n", "kollect-hub", "kollect-hub")

	block, _ := pem.Decode(caPEM)
	sum := sha256.Sum256(block.Bytes)
	fingerprint := "sha256:" + hex.EncodeToString(sum[:])
	for _, p := range pods {
		if logs := h.kubectlRun(t, "logs", "-n", "kollect-hub", p.Name); !strings.Contains(logs, "Agents pin the hub CA: "+fingerprint) {
			t.Fatalf("hub replica %s does not pin the brought CA %s:\n%s", p.Name, fingerprint, logs)
		}
	}
	f.caPEM, f.hubURL = caPEM, fmt.Sprintf("https://%s:%d", nodeIP, fleetHubPort)
	f.caFile = filepath.Join(t.TempDir(), "hub-ca.crt")
	if err := os.WriteFile(f.caFile, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	// The replica that created the store wrote the first admin token into its data
	// directory; the other has none.
	for _, p := range pods {
		out, err := h.kubectlErr("", "exec", "-n", "kollect-hub", p.Name, "--",
			"kollect-hub", "--data-dir=/var/lib/kollect-hub", "--print-admin-token")
		if err == nil {
			if f.admin != "" {
				t.Fatalf("both hub replicas hold a first admin token")
			}
			f.admin = strings.TrimSpace(out)
		}
	}
	if !strings.HasPrefix(f.admin, "kat_") {
		t.Fatalf("no hub replica printed an admin token (%q)", f.admin)
	}
	// The dashboard, as a browser gets it through the node port: never over plain HTTP
	// again, and only its own scripts.
	headers := strings.ToLower(run(t, "curl", "-sSI", "--fail", "--cacert", f.caFile, f.hubURL+"/"))
	for _, want := range []string{"strict-transport-security: max-age=31536000", "content-security-policy: default-src 'self'"} {
		if !strings.Contains(headers, want) {
			t.Errorf("the dashboard's headers lack %q:\n%s", want, headers)
		}
	}
}

// installAgent installs charts/agent in one cluster with the script's values and the hub's
// address, CA pin and bootstrap token, then creates the scenario's two ConfigMaps.
func (f *fleet) installAgent(ctx context.Context, t *testing.T, m *env, token string, extra ...string) {
	name := m.cluster.Name
	m.kubectlRun(t, "create", "namespace", "kollect-system")
	// The repository's path on this host replaces the script's /fleet.git bind mount.
	repo := filepath.Join(t.TempDir(), "repo-values.yaml")
	if err := os.WriteFile(repo, []byte(fmt.Sprintf(`extraVolumes:
  - name: fleet-git
    hostPath: {path: %q, type: Directory}
`, f.repo)), 0o644); err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(f.caPEM)
	sum := sha256.Sum256(block.Bytes)
	args := []string{"install", "kollect-agent", chart(t, "agent"), "-n", "kollect-system",
		"--values", kindFleetFile(t, "agent-values.yaml"), "--values", repo,
		"--set", "image.tag=" + m.images["agent"].Tag, "--set", "clusterName=" + name,
		"--set", "hub.url=" + f.hubURL, "--set", "hub.caFingerprint=sha256:" + hex.EncodeToString(sum[:]),
		"--set", "hub.bootstrapToken.token=" + token, "--wait", "--timeout", "4m"}
	if strings.Contains(strings.Join(extra, " "), "networkPolicy.enabled=true") {
		args = append(args, f.networkPolicyValues(t, m)...)
	}
	began := time.Now()
	m.helmRun(t, append(args, extra...)...)
	pods := m.readyPods(ctx, t, "kollect-system", "app.kubernetes.io/instance=kollect-agent", 1)
	t.Logf("%s: helm install of the agent to Ready in %v", name, time.Since(began).Round(100*time.Millisecond))
	checkPodValues(t, pods[0], extra)
	// Bundles land in kollect-fleet, which the chart created (hub.namespaces' default), never
	// in the agent's own namespace. The bundle's sink is hub-delivered: it reads only a Secret
	// the cluster admin labelled.
	m.kubectlRun(t, "create", "secret", "generic", "pg-credentials", "-n", "kollect-fleet",
		"--from-literal=username=kollect", "--from-literal=password=kollect")
	m.kubectlRun(t, "label", "secret", "pg-credentials", "-n", "kollect-fleet", "kollect.dev/hub-sinks=allow")
	// The bundle's PostgreSQL sink is plaintext (sslMode disable): only the cluster may allow it.
	m.kubectlRun(t, "apply", "-f", kindFleetFile(t, "grant.yaml"))
	for _, color := range []string{"red", "blue"} {
		m.configMap(t, color)
	}
}

// networkPolicyValues name, for the chart's NetworkPolicy, every endpoint the agent dials:
// the API server (the node's host address), the hub's node port and the shared PostgreSQL.
// (The git repository is a volume.)
func (f *fleet) networkPolicyValues(t *testing.T, m *env) []string {
	apiPort := strings.TrimPrefix(m.cluster.Config.Host[strings.LastIndex(m.cluster.Config.Host, ":"):], ":")
	return []string{
		"--set", "networkPolicy.apiServer.cidrs={" + m.cluster.HostIP + "/32}", "--set", "networkPolicy.apiServer.ports={" + apiPort + "}",
		"--set", "networkPolicy.hub.cidrs={" + f.members[0].cluster.NodeIP + "/32}", "--set", fmt.Sprintf("networkPolicy.hub.ports={%d}", fleetHubPort),
		"--set", "networkPolicy.sinks[0].cidrs={" + f.members[0].cluster.HostIP + "/32}", "--set", fmt.Sprintf("networkPolicy.sinks[0].ports={%d}", f.pg.Port),
	}
}

// checkPodValues checks that the values a cluster added are in the pod the kubelet runs.
func checkPodValues(t *testing.T, p corev1.Pod, extra []string) {
	set := strings.Join(extra, " ")
	c := p.Spec.Containers[0]
	if strings.Contains(set, "healthPort=8082") {
		// The probes name the container's port "health".
		port := int32(0)
		for _, cp := range c.Ports {
			if c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil && cp.Name == c.ReadinessProbe.HTTPGet.Port.String() {
				port = cp.ContainerPort
			}
		}
		if port != 8082 || !slices.Contains(c.Args, "--health-probe-bind-address=:8082") {
			t.Errorf("%s: the readiness probe is not on port 8082: probe %+v, ports %+v, args %v", p.Name, c.ReadinessProbe, c.Ports, c.Args)
		}
	}
	if strings.Contains(set, "cacheDir.sizeLimit=256Mi") {
		for _, v := range p.Spec.Volumes {
			if v.Name == "cache" && (v.EmptyDir == nil || v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.String() != "256Mi") {
				t.Errorf("%s: the cache volume is %+v, want a 256Mi emptyDir", p.Name, v.VolumeSource)
			}
		}
	}
}

func (m *env) configMap(t *testing.T, color string) {
	m.kubectlRun(t, "create", "configmap", color, "-n", "default", "--from-literal=color="+color)
	m.kubectlRun(t, "label", "configmap", color, "-n", "default", "inventory=fleet")
}

// bundle is e2e/kind-fleet/bundle.yaml for the shared PostgreSQL, with the given debounce
// (a new value makes a new revision).
func (f *fleet) bundle(t *testing.T, debounce string) string {
	b := strings.NewReplacer("PG_HOST", f.members[0].cluster.HostIP, "PG_PORT", fmt.Sprint(f.pg.Port),
		"debounce: 1s", "debounce: "+debounce).Replace(readFile(t, kindFleetFile(t, "bundle.yaml")))
	return b
}

func bundleRequest(t *testing.T, manifests string) string {
	b, err := json.Marshal(map[string]any{"name": "inventory", "manifests": manifests, "message": "fleet scenario",
		"clusterSelector": map[string]any{"matchLabels": map[string]string{"env": "kind"}}})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// call calls FleetService as the admin with curl over Connect's JSON protocol, at the hub's
// node port, verifying the brought certificate.
func (f *fleet) call(t *testing.T, method, body string) map[string]any {
	t.Helper()
	v, err := f.callErr(method, body)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func (f *fleet) callErr(method, body string) (map[string]any, error) {
	out, err := exec.Command("curl", "-sS", "--fail-with-body", "--cacert", f.caFile, "-H", "Content-Type: application/json",
		"-H", "Authorization: Bearer "+f.admin, f.hubURL+"/kollect.fleet.v1.FleetService/"+method, "-d", body).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %s", method, err, out)
	}
	var v map[string]any
	if err := json.Unmarshal(out, &v); err != nil {
		return nil, fmt.Errorf("%s: %w: %s", method, err, out)
	}
	return v, nil
}

func (f *fleet) clusters(t *testing.T) []any {
	list, _ := f.call(t, "ListClusters", `{}`)["clusters"].([]any)
	return list
}

// waitHealthy waits until the hub reports the three clusters online and running the bundle's
// current revision.
func (f *fleet) waitHealthy(ctx context.Context, t *testing.T) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	eventually(ctx, t, "three online clusters running the bundle", func() error {
		h, err := f.callErr("GetFleetHealth", `{}`)
		if err != nil {
			return err
		}
		if fmt.Sprint(h["clustersOnline"]) != "3" || (h["clustersConfigSkew"] != nil && fmt.Sprint(h["clustersConfigSkew"]) != "0") {
			return fmt.Errorf("fleet health %v", h)
		}
		return nil
	})
}

// waitApplied waits until every cluster reports the bundle's revision applied, in sync.
func (f *fleet) waitApplied(ctx context.Context, t *testing.T, revision string) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	eventually(ctx, t, "revision "+revision+" applied on every cluster", func() error {
		out, err := f.callErr("ListClusters", `{}`)
		if err != nil {
			return err
		}
		list, _ := out["clusters"].([]any)
		applied := 0
		for _, c := range list {
			m, _ := c.(map[string]any)
			bundles, _ := m["bundles"].([]any)
			for _, b := range bundles {
				if b, _ := b.(map[string]any); b["bundle"] == "inventory" && b["appliedRevision"] == revision && m["configInSync"] == true {
					applied++
				}
			}
		}
		if applied != len(f.members) {
			return fmt.Errorf("%d of %d clusters run revision %s: %v", applied, len(f.members), revision, list)
		}
		return nil
	})
}

// waitExports waits until the shared PostgreSQL holds want rows per cluster and the shared
// repository one document per cluster.
func (f *fleet) waitExports(ctx context.Context, t *testing.T, want map[string]int) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	eventually(ctx, t, "every cluster's rows in PostgreSQL and git", func() error {
		out, err := exec.Command("psql", strings.Replace(f.pg.URL, "/postgres?", "/inventory?", 1), "-tAXc",
			"SELECT cluster || '=' || count(*) FROM kollect.rows WHERE inventory = 'fleet' GROUP BY cluster ORDER BY cluster").CombinedOutput()
		if err != nil {
			return fmt.Errorf("psql: %w: %s", err, out)
		}
		var got []string
		for c, n := range want {
			got = append(got, fmt.Sprintf("%s=%d", c, n))
		}
		sort.Strings(got)
		if have := strings.Fields(string(out)); strings.Join(have, " ") != strings.Join(got, " ") {
			return fmt.Errorf("PostgreSQL holds %v, want %v", have, got)
		}
		files, err := exec.Command("git", "-c", "safe.directory=*", "--git-dir", f.repo, "ls-tree", "-r", "--name-only", "main").CombinedOutput()
		if err != nil {
			return fmt.Errorf("git ls-tree: %w: %s", err, files)
		}
		for c := range want {
			if !strings.Contains("\n"+string(files), "\n"+c+"/fleet.yaml\n") {
				return fmt.Errorf("no %s/fleet.yaml in the repository: %s", c, files)
			}
		}
		return nil
	})
}

func (f *fleet) git(t *testing.T, args ...string) string {
	return run(t, "git", append([]string{"-c", "safe.directory=*", "--git-dir", f.repo}, args...)...)
}

func kindFleetFile(t *testing.T, name string) string {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "e2e", "kind-fleet", name)
}

// checkEgressAdmitted checks the NetworkPolicy the agent chart rendered against the agent's
// real connections, as an enforcing network plugin would judge them. The test node's bridge
// network does not enforce NetworkPolicy, so the node's connection tracking is read instead:
// every TCP connection the agent pod opened must be admitted by an egress rule (its reply
// comes from the endpoint after any Service translation, which is what a policy matches),
// and the connections must include the API server, the hub and the sink (the positive
// control: a policy that admitted nothing the agent dials would not pass).
func (f *fleet) checkEgressAdmitted(t *testing.T, m *env) {
	var np networkingv1.NetworkPolicy
	if err := m.cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: "kollect-system", Name: "kollect-agent"}, &np); err != nil {
		t.Fatalf("the chart rendered no NetworkPolicy: %v", err)
	}
	pods := m.readyPods(context.Background(), t, "kollect-system", "app.kubernetes.io/instance=kollect-agent", 1)
	out, err := m.cluster.NodeCommand("conntrack", "-L", "-p", "tcp", "-s", pods[0].Status.PodIP).CombinedOutput()
	if err != nil {
		t.Fatalf("conntrack: %v: %s", err, out)
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		// The second src=/sport= pair is the reply direction's: the endpoint that answered.
		var srcs, sports []string
		for _, field := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(field, "src="); ok {
				srcs = append(srcs, v)
			} else if v, ok := strings.CutPrefix(field, "sport="); ok {
				sports = append(sports, v)
			}
		}
		if len(srcs) < 2 || len(sports) < 2 {
			continue
		}
		peer := srcs[1] + ":" + sports[1]
		if !egressAdmits(np, srcs[1], sports[1]) {
			t.Errorf("the agent connected to %s, which its NetworkPolicy does not admit: %s", peer, line)
		}
		seen[peer] = true
	}
	apiPort := m.cluster.Config.Host[strings.LastIndex(m.cluster.Config.Host, ":")+1:]
	for what, peer := range map[string]string{
		"the API server": m.cluster.HostIP + ":" + apiPort,
		"the hub":        fmt.Sprintf("%s:%d", f.members[0].cluster.NodeIP, fleetHubPort),
		"PostgreSQL":     fmt.Sprintf("%s:%d", f.members[0].cluster.HostIP, f.pg.Port),
	} {
		if !seen[peer] {
			t.Errorf("no connection from the agent to %s (%s) tracked: %v", what, peer, seen)
		}
	}
}

// egressAdmits says whether an egress rule of np admits TCP to ip:port by ipBlock and port.
func egressAdmits(np networkingv1.NetworkPolicy, ip, port string) bool {
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return false
	}
	for _, rule := range np.Spec.Egress {
		portOK := len(rule.Ports) == 0
		for _, p := range rule.Ports {
			if p.Port != nil && p.Port.String() == port {
				portOK = true
			}
		}
		for _, peer := range rule.To {
			if peer.IPBlock == nil {
				continue
			}
			if prefix, err := netip.ParsePrefix(peer.IPBlock.CIDR); err == nil && prefix.Contains(addr) && portOK {
				return true
			}
		}
	}
	return false
}
