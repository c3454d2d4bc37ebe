package apiserver

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

const (
	// freeze is how long the apiserver stays stopped: longer than every lease setting and,
	// by a margin, than the 30 s the webhook-certificate wait used to allow.
	freeze = 40 * time.Second
	// resumeGoal and failoverGoal are issue #18's goals: figures, logged, not asserted.
	resumeGoal   = 10 * time.Second
	failoverGoal = 10 * time.Second
	// leaseDuration is the pair's --leader-elect-lease-duration (kollect-agent's default): a
	// standby may take the Lease no sooner than that after it saw the holder's last renewal.
	leaseDuration = 6 * time.Second
	seeded        = 4
)

// group is one agent (its replicas share a Lease) in a namespace of its own.
type group struct {
	ns, repo string
	replicas []*replica
	rows     []string
}

// TestAPIServerOutageWithLeaderElection runs two agents on one control plane, one of one
// replica ("solo") and one of two ("pair"), each in its own namespace with its own Lease, so
// that one freeze of the apiserver covers both. (a) and (b): the apiserver is frozen for 40 s,
// then resumed and a ConfigMap created in each namespace; no process exits, each repository
// then holds every row, and the time from the resume to that export is reported; of the pair,
// exactly one replica exported. (c): the pair's leader is killed with SIGKILL and a ConfigMap
// created; the standby exports it, having acquired the Lease no sooner than the lease duration
// after the leader's last renewal; the time from the kill is reported.
func TestAPIServerOutageWithLeaderElection(t *testing.T) {
	t.Parallel() // its own control plane
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cp, err := testenv.Start("apiserver", testenv.Options{})
	must(t, err)
	t.Cleanup(func() {
		_ = cp.ThawAPIServer() // a failure mid-freeze must not leave the apiserver stopped
		_ = cp.Stop()
	})
	solo, pair := &group{ns: "solo"}, &group{ns: "pair"}
	for _, g := range []*group{solo, pair} {
		g.repo = setupNamespace(t, ctx, cp.Client, g.ns, seeded)
		for i := range seeded {
			g.rows = append(g.rows, fmt.Sprintf("seed-%d", i))
		}
	}
	solo.replicas = []*replica{startReplica(t, cp, solo.ns, "solo-0")}
	leaseFlag := "--leader-elect-lease-duration=" + leaseDuration.String()
	pair.replicas = []*replica{startReplica(t, cp, pair.ns, "pair-0", leaseFlag), startReplica(t, cp, pair.ns, "pair-1", leaseFlag)}
	all := slices.Concat(solo.replicas, pair.replicas)
	for _, g := range []*group{solo, pair} {
		waitRows(t, ctx, g.repo, g.rows, 60*time.Second, g.ns+": the first export")
	}
	t.Logf("control plane and 3 agents up, first exports done, %s in", time.Since(began).Round(time.Millisecond))

	// (a), (b): the freeze. Nothing changes meanwhile (nothing can), so export counters read
	// before it tell who exported after it.
	before := map[*replica]float64{}
	for _, r := range pair.replicas {
		n, err := r.exports()
		must(t, err)
		before[r] = n
	}
	must(t, cp.FreezeAPIServer())
	frozenAt := time.Now()
	select {
	case <-time.After(freeze):
	case <-firstExit(all):
	}
	must(t, cp.ThawAPIServer())
	thawed := time.Now()
	assertAlive(t, all, fmt.Sprintf("during the %s freeze", thawed.Sub(frozenAt).Round(time.Second)))
	resumed := map[*group]time.Duration{}
	for _, g := range []*group{solo, pair} {
		must(t, cp.Client.Create(ctx, shopConfigMap(g.ns, "after-outage")))
		g.rows = append(g.rows, "after-outage")
	}
	for _, g := range []*group{solo, pair} {
		resumed[g] = waitRows(t, ctx, g.repo, g.rows, 60*time.Second, g.ns+": the export after the outage").Sub(thawed)
	}
	t.Logf("MEASURED: apiserver frozen %s; first export after the resume: 1 replica %s, 2 replicas %s (goal %s)",
		thawed.Sub(frozenAt).Round(time.Second), resumed[solo].Round(100*time.Millisecond), resumed[pair].Round(100*time.Millisecond), resumeGoal)
	assertAlive(t, all, "after the outage")
	// The freeze outlasted the renew deadline, so the leaders must have lost their leases and
	// stepped down in-process: without that the test would not have exercised the step-down.
	for _, r := range all {
		for _, l := range r.logLines("lost the leader lease") {
			t.Logf("%s: %s", r.name, l)
		}
		for _, l := range r.logLines("Successfully acquired lease") {
			t.Logf("%s: %s", r.name, l)
		}
	}
	if len(solo.replicas[0].logLines("lost the leader lease")) == 0 {
		t.Errorf("solo-0 never lost its lease during the %s freeze: the step-down was not exercised", freeze)
	}

	// Exactly one of the pair exported. A second leader would export the same change within
	// its debounce (500 ms) of winning. The window closes when the leader has made the export
	// call of a resync asked after its export (kollect.dev/resync-now, acted on by an elected
	// replica only): a second round of the leader's debounce loop after the change, which a
	// second leader would have needed one round for; then the standby's counter is read.
	leader, standby := whoExported(t, pair.replicas, before)
	led, err := leader.exports()
	must(t, err)
	var inv kollectv1.KollectInventory
	must(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: pair.ns, Name: "inv"}, &inv))
	patch := client.MergeFrom(inv.DeepCopy())
	inv.SetAnnotations(map[string]string{kollectv1.AnnotationResyncNow: fmt.Sprint("after-outage-", time.Now().UnixNano())})
	must(t, cp.Client.Patch(ctx, &inv, patch))
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		n, err := leader.exports()
		must(t, err)
		if n > led {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the leader %s made no export call for the resync asked after the outage (%v calls)", leader.name, n)
		}
	}
	if n, err := standby.exports(); err != nil || n != before[standby] {
		t.Fatalf("the standby %s exported after the outage too (%v -> %v export calls, %v): two leaders", standby.name, before[standby], n, err)
	}

	// (c): the leader is killed; the standby exports the change made right after it. It took
	// over by the Lease's rule: its acquisition followed the dead leader's last renewal by at
	// least the lease duration. A watch of the Lease from before the kill sees every renewal.
	var lease coordinationv1.Lease
	must(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: pair.ns, Name: "kollect-agent"}, &lease))
	leaderID := *lease.Spec.HolderIdentity
	cs, err := kubernetes.NewForConfig(cp.Config)
	must(t, err)
	w, err := cs.CoordinationV1().Leases(pair.ns).Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", "kollect-agent").String(), ResourceVersion: lease.ResourceVersion})
	must(t, err)
	defer w.Stop()
	must(t, leader.cmd.Process.Kill())
	killed := time.Now()
	<-leader.exited
	must(t, cp.Client.Create(ctx, shopConfigMap(pair.ns, "after-kill")))
	pair.rows = append(pair.rows, "after-kill")
	failover := waitRows(t, ctx, pair.repo, pair.rows, 60*time.Second, "pair: the export after the leader's SIGKILL").Sub(killed)
	lastRenew, acquired := lease.Spec.RenewTime.Time, time.Time{}
	for acquired.IsZero() {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the watch of the pair's Lease ended before it showed the takeover")
			}
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok || l.Spec.HolderIdentity == nil || l.Spec.RenewTime == nil {
				continue
			}
			if *l.Spec.HolderIdentity == leaderID {
				lastRenew = l.Spec.RenewTime.Time
				continue
			}
			if l.Spec.AcquireTime == nil {
				t.Fatalf("the Lease passed from %s to %s without an acquire time", leaderID, *l.Spec.HolderIdentity)
			}
			acquired = l.Spec.AcquireTime.Time
		case <-time.After(30 * time.Second):
			t.Fatal("the pair exported after the kill, but the watch of its Lease shows no other holder")
		}
	}
	if gap := acquired.Sub(lastRenew); gap < leaseDuration {
		t.Errorf("the standby acquired the Lease %s after the dead leader's last renewal, less than the lease duration %s: two leaders possible",
			gap.Round(time.Millisecond), leaseDuration)
	}
	t.Logf("MEASURED: leader killed with SIGKILL; the standby acquired the Lease %s after the leader's last renewal and exported %s after the kill (lease flags %s/4s/1s; goal %s)",
		acquired.Sub(lastRenew).Round(100*time.Millisecond), failover.Round(100*time.Millisecond), leaseDuration, failoverGoal)
	assertAlive(t, []*replica{solo.replicas[0], standby}, "after the failover")
	t.Logf("done in %s", time.Since(began).Round(time.Second))
}

// whoExported returns the one replica whose export counter grew since before, and the other.
// The repository can show the rows a moment before the exporting replica records the call
// (the counter is observed after the sink returns), so the counters are polled until one grows.
func whoExported(t *testing.T, rs []*replica, before map[*replica]float64) (leader, standby *replica) {
	t.Helper()
	var grew, flat []*replica
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		grew, flat = nil, nil
		for _, r := range rs {
			n, err := r.exports()
			must(t, err)
			if n > before[r] {
				grew = append(grew, r)
			} else {
				flat = append(flat, r)
			}
		}
		if len(grew) > 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(grew) != 1 {
		t.Fatalf("%d of the pair exported after the outage, want exactly 1", len(grew))
	}
	t.Logf("of the pair, %s exported after the outage and %s stood by", grew[0].name, flat[0].name)
	return grew[0], flat[0]
}

// firstExit is closed when any replica exits, so a crash ends the freeze early and fails.
func firstExit(rs []*replica) <-chan struct{} {
	ch := make(chan struct{})
	var once sync.Once
	for _, r := range rs {
		go func() {
			<-r.exited
			once.Do(func() { close(ch) })
		}()
	}
	return ch
}

func assertAlive(t *testing.T, rs []*replica, when string) {
	t.Helper()
	for _, r := range rs {
		if !r.alive() {
			t.Fatalf("%s exited %s: %v", r.name, when, r.exitErr)
		}
	}
}
