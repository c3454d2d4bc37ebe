package agent

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/agent/internal/sink"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// TestMatchThatFailsIsAConditionNotAnEmptySelection is issue 18 point 13: a match naming a
// field the objects lack (a misspelling) fails on every object; the target says so, with an
// example object and the error, instead of looking like a match that selects nothing. Fixing
// the expression clears it.
func TestMatchThatFailsIsAConditionNotAnEmptySelection(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "matchfailed")
	objs := configMapInventory(ns, 200*time.Millisecond, time.Second)
	target := objs[1].(*kollectv1.KollectTarget)
	target.Spec.Match = "object.metadata.lables.tier == 'web'"
	web := configMap(ns, "a", nil)
	web.Labels["tier"] = "web"
	create(t, web, configMap(ns, "b", nil))
	create(t, objs...)
	recs := &recorders{}
	startAgent(t, nil, "c1", ns, recs)

	got := &kollectv1.KollectTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: target.Name}}
	conds := func() []metav1.Condition { return got.Status.Conditions }
	scopeCondition(t, got, conds, kollectv1.ConditionDegraded, metav1.ConditionTrue, kollectv1.ReasonMatchFailed,
		`match "object.metadata.lables.tier == 'web'" failed on 2 objects`, ns+"/a: ", "no such key: lables")

	// b has no tier label: the optional form makes that "not selected" rather than an error.
	updateObject(t, got, func() { got.Spec.Match = "object.metadata.labels.?tier.orValue('') == 'web'" })
	scopeCondition(t, got, conds, kollectv1.ConditionDegraded, metav1.ConditionFalse, kollectv1.ReasonNoProblems)
	if c := condition(t, got, conds, kollectv1.ConditionDegraded); c.ObservedGeneration != got.Generation {
		t.Fatalf("Degraded cleared at generation %d, the fix is %d", c.ObservedGeneration, got.Generation)
	}
	if !recs.get(ns+"/rec").WaitFor(15*time.Second, func(b []*sink.Batch) bool { return len(b) > 0 && rowNames(b[len(b)-1].Envelope.Rows) == "a" }) {
		t.Fatal("the fixed match did not select a")
	}
}
