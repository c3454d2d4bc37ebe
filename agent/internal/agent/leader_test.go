package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/inventory/delivery"
	"kollect.dev/agent/internal/sink"
)

// TestWarmStandbyTakesOverWithoutReexporting runs two replicas of one agent. Only the leader
// exports; when it stops, the standby (whose watches and snapshot are already warm) takes
// over, does not re-export unchanged data, and exports the next change.
func TestWarmStandbyTakesOverWithoutReexporting(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "standby")
	create(t, configMap(ns, "a", map[string]string{"color": "red"}))
	create(t, configMapInventory(ns, 200*time.Millisecond, time.Second)...)
	recs := &recorders{}
	start := func() func() {
		mgr, err := New(cp.Config, Options{
			Cluster: "c1", Namespaces: []string{ns}, MetricsAddr: "0", HealthAddr: "0", SkipNameValidation: true,
			Sinks: recs.factories(), CacheDir: t.TempDir(),
			LeaderElection: true, LeaderElectionNamespace: ns, LeaderElectionID: "kollect-agent",
			LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 300 * time.Millisecond,
			Backoff: delivery.Backoff{Base: 100 * time.Millisecond, Max: time.Second, TerminalDelay: time.Second, BreakerThreshold: 5, BreakerCooldown: time.Second},
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = mgr.Start(ctx) }()
		stop := func() { cancel(); <-done }
		t.Cleanup(stop)
		return stop
	}
	rec := recs.get(ns + "/rec")
	stopLeader := start()
	if !rec.WaitFor(30*time.Second, func(b []*sink.Batch) bool { return len(b) == 1 }) {
		t.Fatal("leader did not export")
	}
	eventually(t, 10*time.Second, "status written by the leader", func() (bool, string) {
		inv := configMapInventory(ns, 0, 0)[3].(client.Object)
		_ = cp.Client.Get(context.Background(), client.ObjectKeyFromObject(inv), inv)
		return len(inventoryStatus(inv).Sinks) == 1 && inventoryStatus(inv).Sinks[0].Checksum != "", ""
	})
	leader, _ := holder(t, ns)
	start()
	// Setup, not evidence: the standby gets a moment to warm up (watches synced, snapshot
	// built) so that the takeover is a warm one. What follows holds however long it took.
	time.Sleep(2 * time.Second)
	stopLeader()
	eventually(t, 30*time.Second, "the standby holding the Lease", func() (bool, string) {
		h, _ := holder(t, ns)
		return h != "" && h != leader, h
	})
	// Neither the standby nor the new leader exported unchanged data: the window, from the
	// first export to the return of the new leader's call for a resync asked after it took the
	// Lease, holds nothing but that resync, which names the exported checksum as the sink's.
	first := rec.Batches()[0].Envelope.Checksum
	assertRecorderQuiet(t, rec, client.ObjectKeyFromObject(configMapInventory(ns, 0, 0)[3]), 1, first,
		"the standby and the new leader with unchanged data")
	create(t, configMap(ns, "b", map[string]string{"color": "blue"}))
	if !rec.WaitFor(20*time.Second, func(b []*sink.Batch) bool { return len(b) == 3 && len(b[2].Envelope.Rows) == 2 }) {
		t.Fatalf("the new leader did not export the change: %d batches", len(rec.Batches()))
	}
}

// runReplica runs one replica through Run, as kollect-agent does, until the test ends; the
// returned channel receives Run's result if it returns early (a process exit).
func runReplica(t *testing.T, ns string, recs *recorders) <-chan error {
	t.Helper()
	// controller-runtime logs from goroutines that outlive a stopped manager (a released lease
	// is reported as "leader election lost" after the stop), so the log goes to a buffer that
	// may be written after the test, shown if it fails.
	var logMu sync.Mutex
	var logBuf strings.Builder
	log := funcr.New(func(prefix, args string) {
		logMu.Lock()
		defer logMu.Unlock()
		fmt.Fprintln(&logBuf, time.Now().Format("15:04:05.000"), prefix, args)
	}, funcr.Options{})
	t.Cleanup(func() {
		if t.Failed() {
			logMu.Lock()
			defer logMu.Unlock()
			t.Log(logBuf.String())
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		exited <- Run(ctx, cp.Config, Options{
			Cluster: "c1", Namespaces: []string{ns}, MetricsAddr: "0", HealthAddr: "0", SkipNameValidation: true,
			Sinks: recs.factories(), CacheDir: t.TempDir(), Log: log,
			LeaderElection: true, LeaderElectionNamespace: ns, LeaderElectionID: "kollect-agent",
			LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 300 * time.Millisecond,
			Backoff: delivery.Backoff{Base: 100 * time.Millisecond, Max: time.Second, TerminalDelay: time.Second, BreakerThreshold: 5, BreakerCooldown: time.Second},
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	return exited
}

// holder reads the Lease's holder.
func holder(t *testing.T, ns string) (string, *coordinationv1.Lease) {
	t.Helper()
	l := &coordinationv1.Lease{}
	if err := cp.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "kollect-agent"}, l); err != nil {
		return "", nil
	}
	return deref(l.Spec.HolderIdentity), l
}

// TestLostLeaseStepsDownInProcess takes the Lease away from the leader (another holder
// writes it, as a replica that won it during a partition would). The leader's renewals
// fail, it loses the lease and steps down; Run does not return, the next term campaigns
// again, and after the foreign lease lapses a replica leads and exports the next change.
// With two replicas exactly one of them exports it.
func TestLostLeaseStepsDownInProcess(t *testing.T) {
	t.Parallel()
	for _, replicas := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d replicas", replicas), func(t *testing.T) {
			ns := namespace(t, fmt.Sprintf("stepdown-%d", replicas))
			create(t, configMap(ns, "a", map[string]string{"color": "red"}))
			create(t, configMapInventory(ns, 200*time.Millisecond, time.Second)...)
			recs := make([]*recorders, replicas)
			exits := make([]<-chan error, replicas)
			for i := range recs {
				recs[i] = &recorders{}
				exits[i] = runReplica(t, ns, recs[i])
			}
			batches := func() []int {
				n := make([]int, replicas)
				for i, r := range recs {
					n[i] = len(r.get(ns + "/rec").Batches())
				}
				return n
			}
			eventually(t, 30*time.Second, "the first export", func() (bool, string) {
				n := batches()
				return slices.Max(n) == 1, fmt.Sprint(n)
			})
			first, lease := holder(t, ns)
			if first == "" {
				t.Fatal("no Lease holder after the first export")
			}
			before := batches()

			// The theft: a valid lease of someone else's, 4 s long (written again on a
			// conflict: the leader renews every second meanwhile).
			updateObject(t, lease, func() {
				lease.Spec.HolderIdentity = ptr("thief")
				lease.Spec.LeaseDurationSeconds = ptr(int32(4))
				lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
			})
			stolen := time.Now()
			eventually(t, 30*time.Second, "a replica leading again", func() (bool, string) {
				h, _ := holder(t, ns)
				return h != "" && h != "thief", h
			})
			back, _ := holder(t, ns)
			t.Logf("lease back %s after the theft, held by the first leader: %v", time.Since(stolen).Round(time.Millisecond), back == first)
			for i, ch := range exits {
				select {
				case err := <-ch:
					t.Fatalf("replica %d's Run returned after losing the lease: %v", i, err)
				default:
				}
			}
			create(t, configMap(ns, "b", map[string]string{"color": "blue"}))
			eventually(t, 20*time.Second, "the change exported by the new leader", func() (bool, string) {
				n := batches()
				grew := 0
				for i := range n {
					if n[i] > before[i] {
						grew++
					}
				}
				return grew == 1, fmt.Sprint(n)
			})
			// A second exporter would have exported the change by the time the leader has been
			// called for a resync asked after its export: the window closes there, not after a
			// sleep. (Only an elected replica acts on the request; two resyncs would be two
			// leaders as well.)
			awaitResync(t, client.ObjectKeyFromObject(configMapInventory(ns, 0, 0)[3]), func() int {
				total := 0
				for _, r := range recs {
					total += resyncBatches(r.get(ns + "/rec"))()
				}
				return total
			})
			n := batches()
			grew, resynced := 0, 0
			for i := range n {
				all := recs[i].get(ns + "/rec").Batches()
				since := all[before[i]:]
				if len(since) > 0 && since[len(since)-1].Resync {
					resynced++
				}
				if exports := contentExports(since); len(exports) > 0 {
					grew++
					if rows := len(exports[len(exports)-1].Envelope.Rows); rows != 2 {
						t.Errorf("replica %d exported %d rows after leading again, want 2", i, rows)
					}
				}
			}
			if resynced != 1 {
				t.Fatalf("%d replicas acted on one resync request, want exactly 1: %v -> %v", resynced, before, n)
			}
			if grew != 1 {
				t.Fatalf("%d replicas exported after the step-down, want exactly 1: %v -> %v", grew, before, n)
			}
		})
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
