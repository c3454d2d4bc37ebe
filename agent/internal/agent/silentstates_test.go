package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/sink"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// TestUnreferencedTargetOnAWatchedKindBecomesReady: a target no inventory uses, on a kind
// another target already watches, reports Ready=True Watching once that watch is synced; it
// does not stay Syncing for want of an event.
func TestUnreferencedTargetOnAWatchedKindBecomesReady(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "unreferenced")
	create(t, configMap(ns, "a", map[string]string{"color": "red"}))
	create(t, configMapInventory(ns, 100*time.Millisecond, time.Second)...)
	startAgent(t, nil, "c1", ns, &recorders{})
	ctx := context.Background()
	ready := func(name string) func() (bool, string) {
		return func() (bool, string) {
			tgt := &kollectv1.KollectTarget{}
			if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, tgt); err != nil {
				return false, err.Error()
			}
			c := apimeta.FindStatusCondition(tgt.Status.Conditions, kollectv1.ConditionReady)
			if c == nil {
				return false, "no Ready condition"
			}
			return c.Status == metav1.ConditionTrue && c.Reason == kollectv1.ReasonWatching, c.Reason + ": " + c.Message
		}
	}
	eventually(t, 60*time.Second, "the referenced target watching", ready("cm"))
	create(t, &kollectv1.KollectTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "spare"}, Spec: kollectv1.KollectTargetSpec{
		ProfileRef: kollectv1.LocalObjectReference{Name: "cm"},
	}})
	eventually(t, 30*time.Second, "the unreferenced target on the same kind watching", ready("spare"))
}

// TestDeletedCRDTurnsItsTargetNotReady: once the CRD of a watched kind is deleted, its target
// no longer says Ready=True Watching but KindNotFound. (Deleting a CRD deletes its objects, so
// their rows leaving the inventory is the truth.)
func TestDeletedCRDTurnsItsTargetNotReady(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "crdgone")
	gvk := kollectv1.GroupVersionKind{Group: "gone.kollect.test", Version: "v1", Kind: "Gadget"}
	crd := installCRD(t, gvk.Group, gvk.Kind, "gadgets")
	g := &unstructured.Unstructured{}
	g.SetAPIVersion("gone.kollect.test/v1")
	g.SetKind("Gadget")
	g.SetNamespace(ns)
	g.SetName("blue")
	create(t, g)
	create(t, profileTarget(ns, "gadgets", gvk, kollectv1.Attribute{Name: "name", CEL: "object.metadata.name"})...)
	create(t, recordingSink(ns), inventoryFor(ns, "inv", []string{"gadgets"}, 200*time.Millisecond))
	recs := &recorders{}
	startAgent(t, nil, "c1", ns, recs)
	rec := recs.get(ns + "/rec")
	if !rec.WaitFor(40*time.Second, func(b []*sink.Batch) bool { return len(b) > 0 && len(b[len(b)-1].Envelope.Rows) == 1 }) {
		t.Fatal("the gadget was never exported")
	}
	target := &kollectv1.KollectTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gadgets"}}
	eventually(t, 20*time.Second, "Ready=True Watching", func() (bool, string) {
		c := condition(t, target, func() []metav1.Condition { return target.Status.Conditions }, kollectv1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == kollectv1.ReasonWatching, fmt.Sprint(c)
	})

	if err := cp.Client.Delete(context.Background(), crd); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "Ready=False once the CRD is gone", func() (bool, string) {
		c := condition(t, target, func() []metav1.Condition { return target.Status.Conditions }, kollectv1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == kollectv1.ReasonKindNotFound, fmt.Sprint(c)
	})
}
