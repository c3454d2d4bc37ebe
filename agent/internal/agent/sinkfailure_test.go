package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/sink"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// TestSinkFailureDegradesThenRecovers: a sink whose exports fail puts its inventory in
// Degraded=True ExportFailed and Synced=False with the sink's own message, records it in
// status.sinks[].lastError with its class (circuitOpen once the breaker has opened), and the
// first export after the sink recovers clears all of it.
func TestSinkFailureDegradesThenRecovers(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "sinkfail")
	create(t, configMap(ns, "a", map[string]string{"color": "red"}))
	recs := &recorders{}
	rec := recs.get(ns + "/rec")
	rec.FailWith(sink.TransientError(errors.New("connection refused by 127.0.0.1:9")))
	create(t, configMapInventory(ns, 100*time.Millisecond, time.Second)...)
	startAgent(t, nil, "c1", ns, recs)

	inv := &kollectv1.KollectInventory{}
	key := client.ObjectKey{Namespace: ns, Name: "inv"}
	status := func() string {
		var b strings.Builder
		for _, c := range inv.Status.Conditions {
			fmt.Fprintf(&b, "%s=%s %s: %s; ", c.Type, c.Status, c.Reason, c.Message)
		}
		for _, s := range inv.Status.Sinks {
			fmt.Fprintf(&b, "sink %s lastError=%q class=%s lastAttempt=%v lastExport=%v", s.Name, s.LastError, s.ErrorClass, s.LastAttemptTime, s.LastExportTime)
		}
		return b.String()
	}
	eventually(t, 60*time.Second, "Degraded=True ExportFailed with the sink's message and an open breaker", func() (bool, string) {
		if err := cp.Client.Get(context.Background(), key, inv); err != nil {
			return false, err.Error()
		}
		d := apimeta.FindStatusCondition(inv.Status.Conditions, kollectv1.ConditionDegraded)
		s := apimeta.FindStatusCondition(inv.Status.Conditions, kollectv1.ConditionSynced)
		ok := d != nil && d.Status == "True" && d.Reason == kollectv1.ReasonExportFailed && strings.Contains(d.Message, "connection refused by 127.0.0.1:9") &&
			s != nil && s.Status == "False" && s.Reason == kollectv1.ReasonExportFailed &&
			len(inv.Status.Sinks) == 1 && strings.Contains(inv.Status.Sinks[0].LastError, "connection refused") &&
			inv.Status.Sinks[0].ErrorClass == kollectv1.SinkErrorCircuitOpen &&
			inv.Status.Sinks[0].LastAttemptTime != nil && inv.Status.Sinks[0].LastExportTime == nil
		return ok, status()
	})
	if n := len(rec.Batches()); n != 0 {
		t.Fatalf("a failing sink recorded %d batches", n)
	}

	rec.FailWith(nil)
	eventually(t, 60*time.Second, "recovery: Synced=True, Degraded=False, no lastError", func() (bool, string) {
		if err := cp.Client.Get(context.Background(), key, inv); err != nil {
			return false, err.Error()
		}
		d := apimeta.FindStatusCondition(inv.Status.Conditions, kollectv1.ConditionDegraded)
		s := apimeta.FindStatusCondition(inv.Status.Conditions, kollectv1.ConditionSynced)
		ok := d != nil && d.Status == "False" && s != nil && s.Status == "True" &&
			len(inv.Status.Sinks) == 1 && inv.Status.Sinks[0].LastError == "" && inv.Status.Sinks[0].ErrorClass == "" &&
			inv.Status.Sinks[0].Checksum == inv.Status.Checksum
		return ok, status()
	})
	if b := rec.Last(); b == nil || rowNames(b.Envelope.Rows) != "a" {
		t.Fatalf("after recovery the sink holds %v, want row a", b)
	}
}
