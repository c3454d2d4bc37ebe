package collector

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// TestBurstOfTargetsListsOnce: 100 tenants' targets of ConfigMap registered one after the
// other, as the target reconciler registers them at start-up, cost the API server one list of
// ConfigMaps (counted by the kube-apiserver itself, apiserver_request_total), not one per
// target; every target then has its own rows. A target added to the running watch restarts it
// once more, after the quiet period: only the restart is coalesced, there is no incremental
// backfill, so this is one more full list. While it waits, the new target reports that it is
// syncing and the others keep their rows.
func TestBurstOfTargetsListsOnce(t *testing.T) {
	ctx := context.Background()
	const tenants, perNS = 100, 3
	for i := range tenants + 1 {
		ns := fmt.Sprintf("burst-%03d", i)
		if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
		for j := range perNS {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("cm-%d", j)}, Data: map[string]string{"n": fmt.Sprint(j)}}
			if err := cp.Client.Create(ctx, cm); err != nil {
				t.Fatal(err)
			}
		}
	}
	reg := prometheus.NewRegistry()
	metrics := NewMetrics(reg)
	col := New(dynamic.NewForConfigOrDie(cp.Config), Options{Metrics: metrics, Log: logr.Discard()})
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = col.Start(runCtx) }()

	gvk := schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	prof := compile(t, kollectv1.Attribute{Name: "n", JSONPath: "{.data.n}"})
	target := func(i int) *Target {
		ns := fmt.Sprintf("burst-%03d", i)
		tgt, err := NewTarget(TargetKey{Namespace: ns, Name: "configmaps"}, kollectv1.TargetSelection{Names: &kollectv1.NameSelection{Exclude: []string{"kube-root-ca.crt"}}},
			gvk, gvr, true, ProfileRef{Key: ns + "/configmaps@1/uid"}, prof)
		if err != nil {
			t.Fatal(err)
		}
		return tgt
	}
	lists := func() int {
		n, err := cp.Lists(ctx, "configmaps")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// pendingNow is the kind's restart that waits for its targets to be quiet, if any.
	pendingNow := func() *pendingRestart {
		col.mu.Lock()
		defer col.mu.Unlock()
		return col.pending[gvk]
	}
	before := lists()
	// The burst is one restart when no two of its registrations are Quiet apart. The test does
	// not assume the machine keeps them closer: it records the pending restart each
	// registration joined (none: one fired in between) and the gaps of Quiet or more between
	// registrations. Each pending restart costs one list; only a gap can start another.
	restarts := map[*pendingRestart]bool{}
	fired, gaps := 0, 0
	prev := time.Now()
	for i := range tenants {
		col.SetTarget(target(i))
		now := time.Now()
		if i > 0 && now.Sub(prev) >= DefaultCoalesce.Quiet*8/10 { // the timer is reset inside SetTarget
			gaps++
		}
		prev = now
		if p := pendingNow(); p != nil {
			restarts[p] = true
		} else {
			fired++
		}
		// Before the kind's first watch starts, a target is syncing, not an error.
		if st, err := col.Collect(target(i).Key); i == 0 && (err != nil || st.Synced) {
			t.Fatalf("a target waiting for its kind's first watch reports synced=%v, %v; want syncing", st.Synced, err)
		}
		time.Sleep(5 * time.Millisecond) // a reconcile's worth: the burst is not one call
	}
	restartsMade := len(restarts) + fired
	if restartsMade > 1+gaps {
		t.Fatalf("%d targets registered in a burst with %d gaps of %s or more made %d restarts of the watch, want at most %d",
			tenants, gaps, DefaultCoalesce.Quiet*8/10, restartsMade, 1+gaps)
	}
	for i := range tenants {
		waitRows(t, col, target(i).Key, perNS)
	}
	if got := lists() - before; got != restartsMade {
		t.Fatalf("%d targets registered in a burst (%d restarts) cost the API server %d ConfigMap lists, want %d", tenants, restartsMade, got, restartsMade)
	}
	if got := testutil.ToFloat64(metrics.lists.WithLabelValues("", "v1", "ConfigMap")); got != float64(restartsMade) {
		t.Fatalf("kollect_watch_lists_total says %v ConfigMap lists, want %d", got, restartsMade)
	}
	t.Logf("MEASURED: %d targets registered in a burst with %d gaps of %s or more: %d restart(s), %d list(s)",
		tenants, gaps, DefaultCoalesce.Quiet*8/10, restartsMade, restartsMade)

	// One more target on the running watch: syncing until the coalesced restart has listed.
	added := target(tenants)
	col.SetTarget(added)
	if st, err := col.Collect(added.Key); err != nil || st.Synced {
		t.Fatalf("a target the running watch was not built for reports synced=%v (%v), want syncing", st.Synced, err)
	}
	if st, err := col.Collect(target(0).Key); err != nil || !st.Synced || len(st.Rows) != perNS {
		t.Fatalf("while a restart waits, a target of the running watch has synced=%v rows=%d (%v), want its %d rows", st.Synced, len(st.Rows), err, perNS)
	}
	waitRows(t, col, added.Key, perNS)
	if got := lists() - before; got != restartsMade+1 {
		t.Fatalf("an added target cost %d more ConfigMap lists, want 1 (a coalesced restart of the watch)", got-restartsMade)
	}
}

// TestListNotifiesOnce: a watch's initial list does not notify its subscribers of changes,
// neither per object (every notification wakes every inventory of the kind) nor for the
// list's events the handler receives after the store synced; a change after the sync does.
func TestListNotifiesOnce(t *testing.T) {
	ctx := context.Background()
	const ns, objects = "notify-once", 500
	if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	for j := range objects {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("cm-%03d", j)}, Data: map[string]string{"n": fmt.Sprint(j)}}
		if err := cp.Client.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	col := New(dynamic.NewForConfigOrDie(cp.Config), Options{Log: logr.Discard()})
	var calls atomic.Int64
	col.Subscribe(func(schema.GroupVersionKind) { calls.Add(1) })
	gvk := schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	// What the handler had been handed when the sync was told: the whole list.
	countAtSync := make(chan int64, 4)
	col.SubscribeSynced(func([]TargetKey) { countAtSync <- col.watchOf(gvk).count.Load() })
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = col.Start(runCtx) }()
	tgt, err := NewTarget(TargetKey{Namespace: ns, Name: "all"}, kollectv1.TargetSelection{}, gvk,
		schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, true, ProfileRef{Key: ns + "/p@1/uid"},
		compile(t, kollectv1.Attribute{Name: "n", JSONPath: "{.data.n}"}))
	if err != nil {
		t.Fatal(err)
	}
	col.SetTarget(tgt)
	waitRows(t, col, tgt.Key, objects)
	if n := <-countAtSync; n != objects {
		t.Fatalf("the watch synced when its handler had been handed %d of the list's %d objects", n, objects)
	}
	deadline := time.Now().Add(30 * time.Second)
	// Only the watch's start notifies: its sync goes to SubscribeSynced, and the list's events,
	// which the handler receives after the store synced, are not changes.
	if n := calls.Load(); n > 1 {
		t.Fatalf("a list of %d objects notified subscribers %d times, want at most once (the watch's start)", objects, n)
	}
	before := calls.Load()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "late"}, Data: map[string]string{"n": "late"}}
	if err := cp.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	waitRows(t, col, tgt.Key, objects+1)
	for calls.Load() == before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if calls.Load() == before {
		t.Fatal("an object created after the sync did not notify subscribers")
	}
	// The closing control: the informer hands events to its handler in order and the handler
	// notifies synchronously, so any notification the list's events caused came before the
	// late object's. Once the late one is seen, the total is the watch's start (notified from
	// its own goroutine, so possibly after the check above) and the late object: two at most.
	if n := calls.Load(); n > 2 {
		t.Fatalf("a list of %d objects and one late object notified subscribers %d times, want at most 2 (the watch's start and the late object)", objects, n)
	}
}

func (c *Collector) watchOf(gvk schema.GroupVersionKind) *gvkWatch {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.watches[gvk]
}
