package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// retireFixture is one namespace with two ConfigMaps, a target of them and an inventory into
// the recording sink, exported once by a running agent.
func retireFixture(t *testing.T, name string, deletion kollectv1.InventoryDeletion, recs *recorders) (*kollectv1.KollectInventory, *sinktest.Recorder) {
	t.Helper()
	ns := namespace(t, name)
	create(t, configMap(ns, "a", map[string]string{"color": "red"}), configMap(ns, "b", map[string]string{"color": "blue"}))
	create(t, profileTarget(ns, "cms", kollectv1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
		kollectv1.Attribute{Name: "color", JSONPath: "{.data.color}", Optional: true})...)
	inv := inventoryFor(ns, "inv", []string{"cms"}, 200*time.Millisecond)
	inv.Spec.InventoryDeletion = deletion
	create(t, recordingSink(ns), inv)
	rec := recs.get(ns + "/rec")
	startAgent(t, nil, "c1", ns, recs)
	if !rec.WaitFor(30*time.Second, func(b []*sink.Batch) bool { return len(b) > 0 && sortedRowNames(b[len(b)-1].Envelope.Rows) == "a,b" }) {
		t.Fatalf("no first export: %s", describeCoverage(rec.Batches()))
	}
	eventually(t, 20*time.Second, "the finalizer "+kollectv1.FinalizerRetire, func() (bool, string) {
		err := cp.Client.Get(context.Background(), client.ObjectKeyFromObject(inv), inv)
		return err == nil && slices.Contains(inv.Finalizers, kollectv1.FinalizerRetire), fmt.Sprint(inv.Finalizers, err)
	})
	return inv, rec
}

// gone waits until the inventory no longer exists.
func gone(t *testing.T, inv client.Object, within time.Duration) {
	t.Helper()
	eventually(t, within, "the deleted inventory to go", func() (bool, string) {
		err := cp.Client.Get(context.Background(), client.ObjectKeyFromObject(inv), inv)
		return apierrors.IsNotFound(err), fmt.Sprintf("finalizers %v, err %v", inv.GetFinalizers(), err)
	})
}

// TestDeletedInventoryRetainsItsRowsAsRetired is issue 19 point 4, Retain (the default): the
// deleted inventory's last export keeps every row (same checksum, empty diff) and says each
// target is retired; then the finalizer goes and nothing confirms the rows any more.
func TestDeletedInventoryRetainsItsRowsAsRetired(t *testing.T) {
	t.Parallel()
	recs := &recorders{}
	inv, rec := retireFixture(t, "retain", kollectv1.InventoryDeletion{}, recs)
	first := rec.Last()
	if err := cp.Client.Delete(context.Background(), inv); err != nil {
		t.Fatal(err)
	}
	retired := fmt.Sprintf("%s/cms=retired/2/0 ", inv.Namespace)
	if !rec.WaitFor(30*time.Second, func(b []*sink.Batch) bool { return coverageOf(b[len(b)-1]) == retired }) {
		t.Fatalf("coverage of the last export: want %q, got %s", retired, describeCoverage(rec.Batches()))
	}
	last := rec.Last()
	if last.Envelope.Checksum != first.Envelope.Checksum || !last.Diff.Empty() || sortedRowNames(last.Envelope.Rows) != "a,b" {
		t.Fatalf("Retain must keep the rows: checksum %s→%s, diff %+v, rows %s", first.Envelope.Checksum,
			last.Envelope.Checksum, last.Diff, sortedRowNames(last.Envelope.Rows))
	}
	if c := last.Envelope.Coverage[0]; !strings.Contains(c.Reason, "deletionPolicy Retain") {
		t.Fatalf("the retired coverage must say why: %q", c.Reason)
	}
	gone(t, inv, 20*time.Second)
	if got := rec.Purges(); len(got) != 0 || !rec.Holds("c1", inv.Namespace+"/"+inv.Name) {
		t.Fatalf("Retain must keep the state record: purges %v", got)
	}
}

// TestDeletedInventoryDeletesItsRows is point 4, Delete: the last export is an empty snapshot
// whose diff deletes every row, with no coverage left; then, the sink being a sink.Purger,
// the worker purges the inventory, which removes the state record the empty export left;
// only then does the finalizer go.
func TestDeletedInventoryDeletesItsRows(t *testing.T) {
	t.Parallel()
	recs := &recorders{}
	inv, rec := retireFixture(t, "retiredelete", kollectv1.InventoryDeletion{DeletionPolicy: kollectv1.DeletionDelete}, recs)
	if err := cp.Client.Delete(context.Background(), inv); err != nil {
		t.Fatal(err)
	}
	if !rec.WaitFor(30*time.Second, func(b []*sink.Batch) bool { return len(b[len(b)-1].Envelope.Rows) == 0 }) {
		t.Fatalf("no empty last export: %s", describeCoverage(rec.Batches()))
	}
	last := rec.Last()
	if len(last.Envelope.Coverage) != 0 || (!last.Diff.Full && sortedRowNames(last.Diff.Deleted) != "a,b") {
		t.Fatalf("Delete must remove every row and the coverage: coverage %s, diff %+v", coverageOf(last), last.Diff)
	}
	gone(t, inv, 20*time.Second)
	key := inv.Namespace + "/" + inv.Name
	if got := rec.Purges(); !slices.Equal(got, []string{"c1/" + key}) || rec.Holds("c1", key) {
		t.Fatalf("the deleted inventory left its state record: purges %v, still held %v", got, rec.Holds("c1", key))
	}
}

// TestRetiringHoldsUntilTheTimeout: while the sink refuses the last export, the inventory
// stays (Ready=False Retiring, naming the sink and its error); once deletionTimeout passes it
// goes, with a Warning event naming what is left.
func TestRetiringHoldsUntilTheTimeout(t *testing.T) {
	t.Parallel()
	recs := &recorders{}
	inv, rec := retireFixture(t, "retiretimeout", kollectv1.InventoryDeletion{DeletionPolicy: kollectv1.DeletionDelete,
		DeletionTimeout: &metav1.Duration{Duration: 8 * time.Second}}, recs)
	rec.FailWith(sink.TransientError(errors.New("connection refused by 127.0.0.1:9")))
	if err := cp.Client.Delete(context.Background(), inv); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "Ready=False Retiring naming the sink and its error", func() (bool, string) {
		if err := cp.Client.Get(context.Background(), client.ObjectKeyFromObject(inv), inv); err != nil {
			return false, err.Error()
		}
		c := apimeta.FindStatusCondition(inv.Status.Conditions, kollectv1.ConditionReady)
		return c != nil && c.Reason == kollectv1.ReasonRetiring && strings.Contains(c.Message, "snapshot/"+inv.Namespace+"/rec") &&
			strings.Contains(c.Message, "connection refused by 127.0.0.1:9"), fmt.Sprint(c)
	})
	gone(t, inv, 30*time.Second)
	eventually(t, 10*time.Second, "a Warning event "+kollectv1.ReasonRetireTimedOut, func() (bool, string) {
		var events eventsv1.EventList
		if err := cp.Client.List(context.Background(), &events, client.InNamespace(inv.Namespace)); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range events.Items {
			if e.Reason == kollectv1.ReasonRetireTimedOut && e.Type == corev1.EventTypeWarning && strings.Contains(e.Note, "rec") {
				return true, ""
			}
			seen = append(seen, e.Reason)
		}
		return false, fmt.Sprint(seen)
	})
}
