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
	t.Parallel()
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

	// Another update with the same value is not a new request. The update also edits the spec
	// (debounce 100 ms -> 150 ms), so that status.observedGeneration shows when the agent has
	// reconciled it; a change made after that closes the window. A resync the update wrongly
	// asked for shows either as a resync batch before the change's export or, folded into it,
	// as a change exported as a resync.
	inv := &kollectv1.KollectInventory{}
	if err := cp.Client.Get(ctx, key, inv); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(inv.DeepCopy())
	inv.SetAnnotations(map[string]string{kollectv1.AnnotationResyncNow: "first", "touched": fmt.Sprint(time.Now().UnixNano())})
	inv.Spec.Debounce.Duration = 150 * time.Millisecond
	if err := cp.Client.Patch(ctx, inv, patch); err != nil {
		t.Fatal(err)
	}
	gen := inv.GetGeneration()
	eventually(t, 30*time.Second, "the update with the same value reconciled", func() (bool, string) {
		got := &kollectv1.KollectInventory{}
		if err := cp.Client.Get(ctx, key, got); err != nil {
			return false, err.Error()
		}
		return got.Status.ObservedGeneration == gen, fmt.Sprintf("observedGeneration %d, want %d", got.Status.ObservedGeneration, gen)
	})
	create(t, configMap(ns, "b", map[string]string{"color": "blue"}))
	if !rec.WaitFor(30*time.Second, func(b []*sink.Batch) bool { return len(b) > 2 && len(b[len(b)-1].Envelope.Rows) == 2 }) {
		t.Fatalf("the change after the update was not exported: %s", describeBatches(rec.Batches()))
	}
	if b := rec.Batches(); len(b) != 3 || b[2].Resync {
		t.Fatalf("the same resync-now value resynced again: %s", describeBatches(b))
	}
	annotate("second")
	if !rec.WaitFor(30*time.Second, func(b []*sink.Batch) bool { return len(b) == 4 && b[3].Resync }) {
		t.Fatalf("a new resync-now value sent no resync: %d batches", len(rec.Batches()))
	}
}
