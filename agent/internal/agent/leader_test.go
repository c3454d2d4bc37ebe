package agent

import (
	"context"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/inventory/delivery"
	"kollect.dev/agent/internal/sink"
)

// TestWarmStandbyTakesOverWithoutReexporting runs two replicas of one agent. Only the leader
// exports; when it stops, the standby (whose watches and snapshot are already warm) takes
// over, does not re-export unchanged data, and exports the next change.
func TestWarmStandbyTakesOverWithoutReexporting(t *testing.T) {
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
	start()
	time.Sleep(2 * time.Second) // the standby warms up: watches synced, snapshot built
	if n := len(rec.Batches()); n != 1 {
		t.Fatalf("the standby exported: %d batches", n)
	}
	stopLeader()
	time.Sleep(3 * time.Second)
	if n := len(rec.Batches()); n != 1 {
		t.Fatalf("the new leader re-exported unchanged data: %d batches", n)
	}
	create(t, configMap(ns, "b", map[string]string{"color": "blue"}))
	if !rec.WaitFor(20*time.Second, func(b []*sink.Batch) bool { return len(b) == 2 && len(b[1].Envelope.Rows) == 2 }) {
		t.Fatalf("the new leader did not export the change: %d batches", len(rec.Batches()))
	}
}
