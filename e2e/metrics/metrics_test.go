package metrics

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// documentedMetrics reads the metric names of the Metrics table of docs/operations.md.
func documentedMetrics(t *testing.T, root string) []string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(root, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	i := strings.Index(s, "## Metrics")
	j := strings.Index(s[i+1:], "\n## ")
	if i < 0 || j < 0 {
		t.Fatal("docs/operations.md has no Metrics section")
	}
	var names []string
	for _, m := range regexp.MustCompile("(?m)^\\|([^|]*)\\|").FindAllStringSubmatch(s[i:i+1+j], -1) {
		for _, n := range regexp.MustCompile("`(kollect_[a-z_]+)`").FindAllStringSubmatch(m[1], -1) {
			names = append(names, n[1])
		}
	}
	if len(names) < 8 {
		t.Fatalf("found only %d metrics in docs/operations.md: %v", len(names), names)
	}
	return names
}

// served reports which of names have at least one sample in a Prometheus text exposition.
func served(exposition string, names []string) (missing []string) {
	for _, n := range names {
		found := false
		for _, line := range strings.Split(exposition, "\n") {
			if strings.HasPrefix(line, "#") {
				continue
			}
			for _, suffix := range []string{"", "_bucket", "_count", "_sum"} {
				if strings.HasPrefix(line, n+suffix+"{") || strings.HasPrefix(line, n+suffix+" ") {
					found = true
				}
			}
		}
		if !found {
			missing = append(missing, n)
		}
	}
	return missing
}

// TestDocumentedMetricsAreServed: every metric of docs/operations.md has a series on the
// running agent's /metrics once it has watched, exported (git, NATS) and failed to export
// (PostgreSQL on a closed port); and the failing export is counted under its class.
func TestDocumentedMetricsAreServed(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	names := documentedMetrics(t, root)
	bins := t.TempDir()
	built, err := testenv.BuildCommands(bins, "", "./agent/cmd/kollect-agent")
	if err != nil {
		t.Fatal(err)
	}
	cp, err := testenv.Start("metrics", testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	nats, err := testenv.StartNATS(testenv.NATSOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nats.Stop)
	repo, err := testenv.InitBareRepo(filepath.Join(t.TempDir(), "inv.git"))
	if err != nil {
		t.Fatal(err)
	}
	closed, err := testenv.FreePort() // nothing listens there
	if err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	ns := "metrics"
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg"}, StringData: map[string]string{"username": "kollect", "password": "x"}},
		// The grant the agent's default tenant mode requires before the namespace may do anything.
		&kollectv1.KollectScope{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "team"}, Spec: kollectv1.KollectScopeSpec{
			AllowedKinds: []kollectv1.GroupKindRule{{Kind: "ConfigMap"}}, AllowedNamespaces: []string{ns},
			AllowedSinks: []kollectv1.SinkRule{{Family: "*"}}}},
		&kollectv1.KollectProfile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}, Spec: kollectv1.KollectProfileSpec{
			Target:     kollectv1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			Attributes: []kollectv1.Attribute{{Name: "color", JSONPath: "{.data.color}", Optional: true}}}},
		&kollectv1.KollectTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}, Spec: kollectv1.KollectTargetSpec{
			ProfileRef:      kollectv1.LocalObjectReference{Name: "cm"},
			TargetSelection: kollectv1.TargetSelection{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "shop"}}}}},
		&kollectv1.KollectSnapshotSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "repo"}, Spec: kollectv1.KollectSnapshotSinkSpec{
			Type: kollectv1.SnapshotSinkGit, Git: &kollectv1.GitSinkConfig{URL: "file://" + repo}}},
		&kollectv1.KollectEventSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bus"}, Spec: kollectv1.KollectEventSinkSpec{
			Type: kollectv1.EventSinkNATS, Mode: kollectv1.EventModeChanges, BufferSize: 100,
			NATS: &kollectv1.NATSSinkConfig{Servers: []string{nats.URL}, Stream: "KOLLECTMETRICS", CreateStream: true,
				SubjectTemplate: "kollect.{cluster}.{kind}"}}},
		&kollectv1.KollectDatabaseSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "down"}, Spec: kollectv1.KollectDatabaseSinkSpec{
			Type: kollectv1.DatabaseSinkPostgres, Timeout: metav1.Duration{Duration: 5 * time.Second},
			// Nothing listens: refused before any TLS, with the default (verified) sslMode.
			Postgres: &kollectv1.PostgresSinkConfig{Host: "127.0.0.1", Port: int32(closed), Database: "postgres", Table: "rows",
				SecretRef: kollectv1.SecretReference{Name: "pg"}}}},
		&kollectv1.KollectInventory{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "inv"}, Spec: kollectv1.KollectInventorySpec{
			Targets: []kollectv1.LocalObjectReference{{Name: "cm"}},
			Sinks: kollectv1.SinkReferences{Snapshot: []kollectv1.LocalObjectReference{{Name: "repo"}},
				Event:    []kollectv1.LocalObjectReference{{Name: "bus"}},
				Database: []kollectv1.LocalObjectReference{{Name: "down"}}},
			ExportTiming: kollectv1.ExportTiming{Debounce: metav1.Duration{Duration: 200 * time.Millisecond}, MaxDelay: metav1.Duration{Duration: time.Second}}}},
	}
	for i := range 3 {
		objs = append(objs, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("cm-%d", i), Labels: map[string]string{"app": "shop"}},
			Data: map[string]string{"color": "red"}})
	}
	for _, o := range objs {
		if err := cp.Client.Create(ctx, o); err != nil {
			t.Fatalf("%s: %v", o.GetName(), err)
		}
	}

	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "agent.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	pprofPort, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	agent := exec.Command(built[0], "--cluster-name", "m1", "--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", port),
		"--health-probe-bind-address", "0", "--cache-dir", t.TempDir(), "--allow-local-sinks",
		"--pprof-bind-address", fmt.Sprintf("127.0.0.1:%d", pprofPort), "--release-startup-memory-after", "1s")
	agent.Env = append(os.Environ(), "KUBECONFIG="+cp.Kubeconfig)
	agent.Stdout, agent.Stderr = logFile, logFile
	agent.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = agent.Process.Signal(syscall.SIGTERM)
		_ = agent.Wait()
		if t.Failed() {
			raw, _ := os.ReadFile(logPath)
			t.Logf("agent log:\n%s", raw)
		}
	})

	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	var missing []string
	var body string
	touched := false
	deadline := time.Now().Add(90 * time.Second)
	for {
		if resp, err := http.Get(url); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			missing = served(body, names)
			// The watch lag is measured on events after the initial list: change an object
			// once the first export is out.
			if !touched && strings.Contains(body, "kollect_exported_rows{") {
				cm := &corev1.ConfigMap{}
				if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "cm-0"}, cm); err != nil {
					t.Fatal(err)
				}
				cm.Data["color"] = "blue"
				if err := cp.Client.Update(ctx, cm); err != nil {
					t.Fatal(err)
				}
				touched = true
			}
			if len(missing) == 0 && strings.Contains(body, `kollect_export_errors_total{class="transient",sink="database/metrics/down"}`) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 90 s the agent's /metrics has no series for %v (or no transient error of the unreachable sink):\n%s", missing, grepKollect(body))
		}
		time.Sleep(500 * time.Millisecond)
	}

	// --pprof-bind-address (docs/operations.md, docs/performance.md) serves Go's heap profile.
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/heap?debug=1", pprofPort))
	if err != nil {
		t.Fatalf("--pprof-bind-address: %v", err)
	}
	heap, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(heap), "heap profile:") {
		t.Fatalf("--pprof-bind-address: GET /debug/pprof/heap answered %s: %.200s", resp.Status, heap)
	}

	// --release-startup-memory-after (docs/operations.md, docs/performance.md): the agent
	// logs its releases, the last once the load settled, and the kernel accepted the advice (an
	// error would be logged instead).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		raw, _ := os.ReadFile(logPath)
		if strings.Contains(string(raw), `"msg":"released start-up memory","when":"settled"`) {
			break
		}
		if strings.Contains(string(raw), "could not release the start-up pages") {
			t.Fatal("the agent could not release its start-up pages (see its log)")
		}
		if time.Now().After(deadline) {
			t.Fatal(`30 s after the metrics were served the agent has not logged "released start-up memory" when its load settled`)
		}
	}
	checkStartupAdvice(t, built[0], agent.Process.Pid, logPath)
}

func grepKollect(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "kollect_") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
