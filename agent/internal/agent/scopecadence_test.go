package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/agent/internal/sink"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// TestScopeMinimumDebounceAlsoBoundsMaxDelay is issue 18 point 5: a scope's minimum debounce
// must hold under constant churn too. The inventory asks for debounce 200ms and maxDelay 1s;
// the scope's floor is 3s. Raising only the debounce left maxDelay at 1s, so churn exported
// every second; with maxDelay raised to the floor as well, no two exports are closer than it.
func TestScopeMinimumDebounceAlsoBoundsMaxDelay(t *testing.T) {
	t.Parallel()
	const floor = 3 * time.Second
	ns := namespace(t, "floor")
	setScope(t, ns, allowConfigMaps(ns))
	create(t, configMap(ns, "churn", map[string]string{"color": "start"}))
	create(t, configMapInventory(ns, 200*time.Millisecond, time.Second)...)
	recs := &recorders{}
	startAgent(t, nil, "c1", ns, recs)
	rec := recs.get(ns + "/rec")
	if !rec.WaitFor(30*time.Second, func(b []*sink.Batch) bool { return len(b) > 0 }) {
		t.Fatal("no initial export")
	}
	// The scope tightens after admission: the reconciler holds the inventory to the floor.
	setScope(t, ns, func(s *kollectv1.KollectScopeSpec) { s.MinDebounce = &metav1.Duration{Duration: floor} })
	inv := &kollectv1.KollectInventory{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "inv"}}
	scopeCondition(t, inv, func() []metav1.Condition { return inv.Status.Conditions }, kollectv1.ConditionDegraded, metav1.ConditionTrue,
		kollectv1.ReasonScopeCadenceTooFast, "the minimum applies")

	base := len(rec.Batches())
	last := ""
	stopChurn := time.Now().Add(8 * time.Second)
	for i := 0; time.Now().Before(stopChurn); i++ {
		last = fmt.Sprint(i)
		if err := cp.Client.Update(context.Background(), configMap(ns, "churn", map[string]string{"color": last})); err != nil {
			t.Fatal(err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	want := fmt.Sprintf(`{"color":%q,"keys":1}`, last)
	if !rec.WaitFor(20*time.Second, func(b []*sink.Batch) bool {
		rows := b[len(b)-1].Envelope.Rows
		return len(rows) == 1 && string(rows[0].Attributes) == want
	}) {
		t.Fatal("the last change was not exported")
	}
	batches := rec.Batches()[base:]
	if len(batches) < 2 {
		t.Fatalf("%d exports during 8 s of churn and after it, want at least 2", len(batches))
	}
	for i := 1; i < len(batches); i++ {
		gap := batches[i].Envelope.ExportedAt.Sub(batches[i-1].Envelope.ExportedAt)
		if gap < floor*9/10 {
			t.Fatalf("exports %d and %d only %s apart under churn; the scope's minimum debounce is %s", i-1, i, gap.Round(time.Millisecond), floor)
		}
	}
}
