package apiserver

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/testenv"
)

// replica is one kollect-agent process. exited is closed when it ends, for whatever reason:
// the test's claim is that an outage never closes it.
type replica struct {
	name             string
	metrics, healthz string
	log              string
	cmd              *exec.Cmd
	exited           chan struct{}
	exitErr          error
}

// startReplica runs kollect-agent with leader election on, limited to ns (its Kollect
// objects, its watches and its Lease), with the default lease flags unless extra says
// otherwise. It returns once /readyz answers.
func startReplica(t *testing.T, cp *testenv.ControlPlane, ns, name string, extra ...string) *replica {
	t.Helper()
	mp, err := testenv.FreePort()
	must(t, err)
	hp, err := testenv.FreePort()
	must(t, err)
	r := &replica{name: name, metrics: fmt.Sprintf("127.0.0.1:%d", mp), healthz: fmt.Sprintf("127.0.0.1:%d", hp),
		log: filepath.Join(t.TempDir(), name+".log"), exited: make(chan struct{})}
	logFile, err := os.Create(r.log)
	must(t, err)
	defer logFile.Close()
	args := []string{"--cluster-name", "e2e", "--namespaces", ns, "--leader-elect", "--leader-election-namespace", ns,
		"--leader-election-id", "kollect-agent", "--metrics-bind-address", r.metrics, "--health-probe-bind-address", r.healthz,
		"--cache-dir", t.TempDir(), "--allow-local-sinks"}
	r.cmd = exec.Command(agentBin, append(args, extra...)...)
	r.cmd.Env = append(os.Environ(), "KUBECONFIG="+cp.Kubeconfig)
	r.cmd.Stdout, r.cmd.Stderr = logFile, logFile
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	must(t, r.cmd.Start())
	go func() { r.exitErr = r.cmd.Wait(); close(r.exited) }()
	t.Cleanup(func() {
		if r.alive() {
			_ = r.cmd.Process.Signal(syscall.SIGTERM)
			<-r.exited
		}
		if t.Failed() {
			raw, _ := os.ReadFile(r.log)
			keep := filepath.Join(os.TempDir(), "kollect-apiserver-"+name+".log")
			_ = os.WriteFile(keep, raw, 0o644)
			t.Logf("%s's log is in %s", name, keep)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + r.healthz + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return r
			}
		}
		if time.Now().After(deadline) || !r.alive() {
			t.Fatalf("%s: /readyz not OK after 30s (alive %v): %v", name, r.alive(), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (r *replica) alive() bool {
	select {
	case <-r.exited:
		return false
	default:
		return true
	}
}

// logLines returns the lines of the process's log that contain substr.
func (r *replica) logLines(substr string) []string {
	raw, _ := os.ReadFile(r.log)
	var out []string
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return out
}

// exports is the number of export calls the process made (kollect_export_duration_seconds
// observations over every sink). The metric lives as long as the process, across terms.
func (r *replica) exports() (float64, error) {
	resp, err := http.Get("http://" + r.metrics + "/metrics")
	if err != nil {
		return 0, fmt.Errorf("%s: scraping metrics: %w", r.name, err)
	}
	defer resp.Body.Close()
	var n float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "kollect_export_duration_seconds_count") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: metric line %q: %w", r.name, line, err)
		}
		n += v
	}
	return n, sc.Err()
}

// inventoryYAML is one namespace's pipeline: the ConfigMaps labelled app=shop, exported
// as one NDJSON document to a bare git repository, under the KollectScope the agent's default
// tenant mode requires. No resync: every export the test sees comes from a change it made.
const inventoryYAML = `apiVersion: kollect.dev/v1alpha1
kind: KollectScope
metadata: {name: team, namespace: NS}
spec:
  allowedKinds: [{group: "", kind: ConfigMap}]
  allowedNamespaces: [NS]
  allowedSinks: [{family: snapshot}]
---
apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: cm, namespace: NS}
spec:
  target: {version: v1, kind: ConfigMap}
  attributes:
    - {name: color, jsonPath: "{.data.color}"}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectTarget
metadata: {name: cm, namespace: NS}
spec:
  profileRef: {name: cm}
  labelSelector: {matchLabels: {app: shop}}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectSnapshotSink
metadata: {name: repo, namespace: NS}
spec:
  type: git
  git: {url: "file://REPO"}
  serialization: {format: ndjson}
  layout: {mode: document}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectInventory
metadata: {name: inv, namespace: NS}
spec:
  targets: [{name: cm}]
  sinks: {snapshot: [{name: repo}]}
  exportTiming: {debounce: 500ms, maxDelay: 5s}
`

// setupNamespace creates ns with its pipeline exporting to a new bare repository and seeds
// n ConfigMaps; it returns the repository's path.
func setupNamespace(t *testing.T, ctx context.Context, c client.Client, ns string, n int) string {
	t.Helper()
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	repo, err := testenv.InitBareRepo(filepath.Join(t.TempDir(), ns+".git"))
	must(t, err)
	decode := serializer.NewCodecFactory(testenv.Scheme).UniversalDeserializer().Decode
	stream := strings.NewReplacer("NS", ns, "REPO", repo).Replace(inventoryYAML)
	for _, doc := range strings.Split(stream, "\n---\n") {
		obj, _, err := decode([]byte(doc), nil, nil)
		must(t, err)
		must(t, c.Create(ctx, obj.(client.Object)))
	}
	for i := range n {
		must(t, c.Create(ctx, shopConfigMap(ns, fmt.Sprintf("seed-%d", i))))
	}
	return repo
}

func shopConfigMap(ns, name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "shop"}},
		Data: map[string]string{"color": "red"}}
}

// repoRows lists the names of the rows on the repository's main branch, read with the git CLI.
func repoRows(ctx context.Context, repo string) (map[string]bool, error) {
	files, err := git(ctx, repo, "ls-tree", "-r", "--name-only", "main")
	if err != nil {
		return nil, err
	}
	rows := map[string]bool{}
	for _, path := range strings.Fields(files) {
		if !strings.HasSuffix(path, ".ndjson") {
			continue
		}
		doc, err := git(ctx, repo, "show", "main:"+path)
		if err != nil {
			return nil, err
		}
		dec := json.NewDecoder(strings.NewReader(doc))
		for {
			var row struct{ Name string }
			if err := dec.Decode(&row); err == io.EOF {
				break
			} else if err != nil {
				return nil, fmt.Errorf("%s in %s: %w", path, repo, err)
			}
			rows[row.Name] = true
		}
	}
	return rows, nil
}

func git(ctx context.Context, repo string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "git", append([]string{"--git-dir", repo}, args...)...).Output()
	if err != nil {
		return "", fmt.Errorf("git %s on %s: %w", strings.Join(args, " "), repo, err)
	}
	return string(out), nil
}

// waitRows polls the repository until it holds exactly want (names) and returns when it
// first did; it fails the test after timeout.
func waitRows(t *testing.T, ctx context.Context, repo string, want []string, timeout time.Duration, what string) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last map[string]bool
	var lastErr error
	for time.Now().Before(deadline) {
		got, err := repoRows(ctx, repo)
		if err == nil && len(got) == len(want) && hasAll(got, want) {
			return time.Now()
		}
		last, lastErr = got, err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: the repository did not hold the %d rows %v within %s; it holds %v (%v)", what, len(want), want, timeout, last, lastErr)
	return time.Time{}
}

func hasAll(got map[string]bool, want []string) bool {
	for _, w := range want {
		if !got[w] {
			return false
		}
	}
	return true
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
