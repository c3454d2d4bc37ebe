package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"kollect.dev/testenv"
)

// env is what every test of the package shares: one cluster with a real node (starting one
// costs about as much as a test), PostgreSQL reachable from the pods, and the images.
type env struct {
	cluster *testenv.NodeCluster
	pg      *testenv.Postgres
	images  map[string]testenv.ImageRef
	helm    string
	kubectl string
}

var shared struct {
	once sync.Once
	env  *env
	err  error
}

func setup(t *testing.T) *env {
	t.Helper()
	shared.once.Do(func() { shared.env, shared.err = start() })
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.env
}

func start() (*env, error) {
	dir, err := testenv.Images()
	if err != nil {
		return nil, err
	}
	return newEnv("charts", filepath.Join(dir, "agent.tar"), filepath.Join(dir, "hub.tar"))
}

// newEnv starts a cluster with a real node, the given image archives imported, and a
// PostgreSQL its pods can reach.
func newEnv(name string, archives ...string) (*env, error) {
	e, err := newTools()
	if err != nil {
		return nil, err
	}
	begin := time.Now()
	if e.cluster, err = testenv.StartNodeCluster(name, archives...); err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "node cluster %s Ready in %v\n", name, time.Since(begin).Round(100*time.Millisecond))
	if e.pg, err = testenv.StartPostgresWith(testenv.PostgresOptions{
		ListenAddresses: []string{e.cluster.HostIP},
		TrustNetworks:   []string{e.cluster.PodCIDR()},
	}); err != nil {
		e.cluster.Stop()
		return nil, err
	}
	return e, nil
}

// newTools is an env without a cluster: the images and the clients the tests run.
func newTools() (*env, error) {
	dir, err := testenv.Images()
	if err != nil {
		return nil, err
	}
	e := &env{}
	if e.images, err = testenv.ImageRefs(dir); err != nil {
		return nil, err
	}
	if e.helm, err = testenv.Tool("helm"); err != nil {
		return nil, err
	}
	assets, err := testenv.AssetsDir()
	if err != nil {
		return nil, err
	}
	e.kubectl = filepath.Join(assets, "kubectl")
	return e, nil
}

func (e *env) stop() {
	e.pg.Shutdown()
	e.cluster.Stop()
}

func TestMain(m *testing.M) {
	// The tests read the API with controller-runtime's client, which logs nothing they need.
	ctrllog.SetLogger(logr.Discard())
	code := m.Run()
	if shared.env != nil {
		shared.env.stop()
	}
	os.Exit(code)
}

// run runs a command the project did not write (helm, kubectl, psql, curl) and returns its
// output, failing the test with it on error.
func run(t *testing.T, bin string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (e *env) helmRun(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(e.helm, append([]string{"--kubeconfig", e.cluster.Kubeconfig}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s\n%s", strings.Join(args, " "), err, out, e.clusterState())
	}
	return string(out)
}

// clusterState is what a failed install is read from: the pods, the events, and the end of
// the kubelet's log.
func (e *env) clusterState() string {
	pods, _ := e.kubectlErr("", "get", "pods", "-A", "-o", "wide")
	events, _ := e.kubectlErr("", "get", "events", "-A", "--sort-by=.lastTimestamp")
	kubelet := e.cluster.ComponentLog("kubelet")
	if lines := strings.Split(kubelet, "\n"); len(lines) > 40 {
		kubelet = strings.Join(lines[len(lines)-40:], "\n")
	}
	return "pods:\n" + pods + "\nevents:\n" + events + "\nkubelet log (end):\n" + kubelet
}

func (e *env) kubectlRun(t *testing.T, args ...string) string {
	t.Helper()
	return run(t, e.kubectl, append([]string{"--kubeconfig", e.cluster.Kubeconfig}, args...)...)
}

// kubectlErr runs kubectl and returns its output and error, for commands that must fail.
func (e *env) kubectlErr(stdin string, args ...string) (string, error) {
	cmd := exec.Command(e.kubectl, append([]string{"--kubeconfig", e.cluster.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// readyPods waits until want pods match selector in ns, all Ready by the kubelet's probes, and
// returns them.
func (e *env) readyPods(ctx context.Context, t *testing.T, ns, selector string, want int) []corev1.Pod {
	t.Helper()
	sel, err := labels.Parse(selector)
	if err != nil {
		t.Fatal(err)
	}
	var last string
	for {
		var pods corev1.PodList
		if err := e.cluster.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel}); err == nil {
			var ready []corev1.Pod
			last = ""
			for _, p := range pods.Items {
				if p.DeletionTimestamp == nil && podReady(p) {
					ready = append(ready, p)
				}
				last += fmt.Sprintf("\n  %s: %s %s", p.Name, p.Status.Phase, statuses(p))
			}
			if len(ready) == want && len(pods.Items) == want {
				return ready
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %d Ready pods %s in %s:%s\n%s", want, selector, ns, last, e.clusterState())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func statuses(p corev1.Pod) string {
	var s []string
	for _, c := range p.Status.ContainerStatuses {
		state := "running"
		switch {
		case c.State.Waiting != nil:
			state = "waiting " + c.State.Waiting.Reason + " " + c.State.Waiting.Message
		case c.State.Terminated != nil:
			state = fmt.Sprintf("terminated %s (exit %d) %s", c.State.Terminated.Reason, c.State.Terminated.ExitCode, c.State.Terminated.Message)
		}
		s = append(s, fmt.Sprintf("%s ready=%v restarts=%d %s", c.Name, c.Ready, c.RestartCount, state))
	}
	return strings.Join(s, "; ")
}

// eventually polls f until it returns nil or ctx ends.
func eventually(ctx context.Context, t *testing.T, what string, f func() error) {
	t.Helper()
	var err error
	for {
		if err = f(); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
