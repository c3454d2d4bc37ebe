package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/sink"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// TestResyncNowAnnotation: an inventory without a resyncInterval exports only on change;
// annotating it kollect.dev/resync-now sends its sink one resync at once and records the value
// in status.resyncRequest, and the same value again (any other update) asks nothing more.
func TestResyncNowAnnotation(t *testing.T) {
	ns := namespace(t, "resync-now")
	create(t, configMap(ns, "a", map[string]string{"color": "red"}))
	recs := &recorders{}
	rec := recs.get(ns + "/rec")
	create(t, configMapInventory(ns, 100*time.Millisecond, time.Second)...)
	startAgent(t, nil, "c1", ns, recs)
	if !rec.WaitFor(60*time.Second, func(b []*sink.Batch) bool { return len(b) == 1 }) {
		t.Fatalf("no first export: %d batches", len(rec.Batches()))
	}

	ctx := context.Background()
	key := client.ObjectKey{Namespace: ns, Name: "inv"}
	annotate := func(value string) {
		t.Helper()
		inv := &kollectv1.KollectInventory{}
		if err := cp.Client.Get(ctx, key, inv); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(inv.DeepCopy())
		inv.SetAnnotations(map[string]string{kollectv1.AnnotationResyncNow: value, "touched": fmt.Sprint(time.Now().UnixNano())})
		if err := cp.Client.Patch(ctx, inv, patch); err != nil {
			t.Fatal(err)
		}
	}
	annotate("first")
	if !rec.WaitFor(30*time.Second, func(b []*sink.Batch) bool { return len(b) == 2 && b[1].Resync }) {
		t.Fatalf("kollect.dev/resync-now sent no resync: %d batches", len(rec.Batches()))
	}
	eventually(t, 30*time.Second, "status.resyncRequest records the value", func() (bool, string) {
		inv := &kollectv1.KollectInventory{}
		if err := cp.Client.Get(ctx, key, inv); err != nil {
			return false, err.Error()
		}
		return inv.Status.ResyncRequest == "first", "resyncRequest=" + inv.Status.ResyncRequest
	})

	// Another update with the same value is not a new request: over the window in which the
	// first one was acted on (debounce + 2 s) the sink receives nothing.
	annotate("first")
	if rec.WaitFor(2*time.Second, func(b []*sink.Batch) bool { return len(b) > 2 }) {
		t.Fatalf("the same resync-now value resynced again: %d batches", len(rec.Batches()))
	}
	annotate("second")
	if !rec.WaitFor(30*time.Second, func(b []*sink.Batch) bool { return len(b) == 3 && b[2].Resync }) {
		t.Fatalf("a new resync-now value sent no resync: %d batches", len(rec.Batches()))
	}
}
