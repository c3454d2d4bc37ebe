package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/sink"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// TestMissingTargetKeepsItsRows is issue 18 point 9: a target the inventory names but that
// does not exist (deleted, or a typo) is unknown, not empty. Its rows stay in the sink while
// the inventory says Ready=False TargetNotFound; the other targets keep exporting; the rows
// go only when the user removes the reference.
func TestMissingTargetKeepsItsRows(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "missing")
	ctx := context.Background()
	objs := configMapInventory(ns, 200*time.Millisecond, time.Second)
	inv := objs[3].(*kollectv1.KollectInventory)
	inv.Spec.Targets = append(inv.Spec.Targets, kollectv1.LocalObjectReference{Name: "other"})
	other := &kollectv1.KollectTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other"}, Spec: kollectv1.KollectTargetSpec{
		ProfileRef:      kollectv1.LocalObjectReference{Name: "cm"},
		TargetSelection: kollectv1.TargetSelection{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "other"}}},
	}}
	otherMap := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "other"}}}
	}
	create(t, configMap(ns, "a", map[string]string{"color": "red"}), configMap(ns, "b", nil), otherMap("o1"))
	create(t, append(objs, other)...)
	recs := &recorders{}
	startAgent(t, nil, "c1", ns, recs)
	rec := recs.get(ns + "/rec")
	if !rec.WaitFor(30*time.Second, func(b []*sink.Batch) bool { return len(b) > 0 && rowNames(b[len(b)-1].Envelope.Rows) == "a,b,o1" }) {
		t.Fatal("no first export of a,b,o1")
	}
	readyIs := func(status metav1.ConditionStatus, reason string, want ...string) {
		t.Helper()
		got := &kollectv1.KollectInventory{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "inv"}}
		scopeCondition(t, got, func() []metav1.Condition { return got.Status.Conditions }, kollectv1.ConditionReady, status, reason, want...)
	}

	// The referenced target is deleted: the inventory says so and its rows stay.
	if err := cp.Client.Delete(ctx, &kollectv1.KollectTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}}); err != nil {
		t.Fatal(err)
	}
	readyIs(metav1.ConditionFalse, kollectv1.ReasonTargetNotFound, "KollectTarget "+ns+"/cm")
	// A change of a known target is still exported, with the missing target's rows.
	create(t, otherMap("o2"))
	if !rec.WaitFor(15*time.Second, func(b []*sink.Batch) bool {
		rows := b[len(b)-1].Envelope.Rows
		return len(rows) > 0 && rows[len(rows)-1].Name == "o2"
	}) {
		t.Fatalf("the known target's change was not exported; last export %q", rowNames(rec.Last().Envelope.Rows))
	}
	for i, b := range rec.Batches() {
		if got := rowNames(b.Envelope.Rows); got != "a,b,o1" && got != "a,b,o1,o2" {
			t.Fatalf("export %d holds %q: the deleted target's rows a,b were dropped", i, got)
		}
	}

	// A typo in a new reference: TargetNotFound names it, nothing is lost.
	edit := func(change func(*kollectv1.KollectInventory)) {
		t.Helper()
		cur := &kollectv1.KollectInventory{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "inv"}}
		updateObject(t, cur, func() { change(cur) })
	}
	edit(func(i *kollectv1.KollectInventory) {
		i.Spec.Targets = append(i.Spec.Targets, kollectv1.LocalObjectReference{Name: "othr"})
	})
	readyIs(metav1.ConditionFalse, kollectv1.ReasonTargetNotFound, "KollectTarget "+ns+"/othr")

	// The user removes both references: now the rows go, and the inventory is Ready.
	edit(func(i *kollectv1.KollectInventory) {
		i.Spec.Targets = []kollectv1.LocalObjectReference{{Name: "other"}}
	})
	if !rec.WaitFor(15*time.Second, func(b []*sink.Batch) bool { return rowNames(b[len(b)-1].Envelope.Rows) == "o1,o2" }) {
		t.Fatalf("rows of the removed reference still exported: %q", rowNames(rec.Last().Envelope.Rows))
	}
	readyIs(metav1.ConditionTrue, kollectv1.ReasonSnapshotReady)
	got := &kollectv1.KollectInventory{}
	_ = cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "inv"}, got)
	if c := apimeta.FindStatusCondition(got.Status.Conditions, kollectv1.ConditionReady); c == nil || c.ObservedGeneration != got.Generation {
		t.Fatalf("Ready not at generation %d: %s", got.Generation, fmt.Sprint(c))
	}
}
