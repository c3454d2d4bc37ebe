package agent

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"kollect.dev/agent/internal/inventory/delivery"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
	"kollect.dev/testenv"
)

var cp *testenv.ControlPlane

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard()) // each agent logs through its own logger
	var err error
	if cp, err = testenv.Start("agent", testenv.Options{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = cp.Stop()
	os.Exit(code)
}

// recorders hands out one Recorder per sink name, shared across agent restarts.
type recorders struct {
	mu   sync.Mutex
	byID map[string]*sinktest.Recorder
}

func (r *recorders) get(name string) *sinktest.Recorder {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byID == nil {
		r.byID = map[string]*sinktest.Recorder{}
	}
	if r.byID[name] == nil {
		r.byID[name] = sinktest.NewRecorder()
	}
	return r.byID[name]
}

func (r *recorders) factories() sink.Factories {
	f := func(_ context.Context, obj client.Object, env sink.Env) (sink.Sink, error) {
		return r.get(env.Namespace + "/" + obj.GetName()), nil
	}
	return sink.Factories{"snapshot/git": f, "database/postgres": f, "event/nats": f}
}

// startAgent runs an agent until the test ends (or stop is called).
func startAgent(t testing.TB, cfg *rest.Config, cluster, ns string, recs *recorders) (stop func()) {
	t.Helper()
	return startAgentWith(t, cfg, cluster, ns, recs.factories())
}

// startAgentWith runs an agent with the given sink factories; nil runs the production table
// (package sink/backends) through the same default as kollect-agent, for the real-sink tests.
func startAgentWith(t testing.TB, cfg *rest.Config, cluster, ns string, factories sink.Factories) (stop func()) {
	t.Helper()
	return startAgentIn(t, cfg, cluster, ns, factories, t.TempDir())
}

// startAgentIn runs an agent with cacheDir as its --cache-dir, for a restart that keeps it.
func startAgentIn(t testing.TB, cfg *rest.Config, cluster, ns string, factories sink.Factories, cacheDir string) (stop func()) {
	t.Helper()
	log := logr.Discard()
	if tt, ok := t.(*testing.T); ok {
		log = testr.NewWithOptions(tt, testr.Options{Verbosity: 0})
	}
	if cfg == nil {
		cfg = cp.Config
	}
	mgr, err := New(cfg, Options{AllowLocalSinks: true,
		Cluster: cluster, Namespaces: namespacesOf(ns), MetricsAddr: "0", HealthAddr: "0", SkipNameValidation: true, Sinks: factories,
		CacheDir: cacheDir, Log: log,
		Backoff: delivery.Backoff{Base: 100 * time.Millisecond, Max: time.Second, TerminalDelay: time.Second, BreakerThreshold: 5, BreakerCooldown: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("agent %s: %v", cluster, err)
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// namespacesOf limits an agent to ns, or to nothing ("" means every namespace).
func namespacesOf(ns string) []string {
	if ns == "" {
		return nil
	}
	return []string{ns}
}

func namespace(t *testing.T, name string) string {
	t.Helper()
	if err := cp.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}

func create(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := cp.Client.Create(context.Background(), o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
}

// eventually polls cond until it holds or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s: %s", what, last)
}

// updateObject reads obj again, applies change and updates it, and does so again on a
// conflict: the agent writes the status of the objects it reconciles meanwhile.
func updateObject(t *testing.T, obj client.Object, change func()) {
	t.Helper()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := cp.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		change()
		return cp.Client.Update(context.Background(), obj)
	}); err != nil {
		t.Fatalf("updating %T %s: %v", obj, obj.GetName(), err)
	}
}
