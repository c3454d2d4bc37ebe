package sinks

import (
	"context"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// changeWhileDown changes three objects of changeNS and deletes two, as happens while the
// agent is stopped: two Deployments scaled, a ConfigMap's mode edited, a ConfigMap and a
// Service deleted. It returns the write-marker units of their rows ("uid:<uid>").
func changeWhileDown(ctx context.Context, c client.Client) (map[string]bool, error) {
	touched := map[string]bool{}
	for _, name := range []string{"api", "worker"} {
		var d appsv1.Deployment
		if err := c.Get(ctx, client.ObjectKey{Namespace: changeNS, Name: name}, &d); err != nil {
			return nil, fmt.Errorf("deployment %s: %w", name, err)
		}
		replicas := *d.Spec.Replicas + 3
		d.Spec.Replicas = &replicas
		if err := c.Update(ctx, &d); err != nil {
			return nil, fmt.Errorf("scaling deployment %s: %w", name, err)
		}
		touched["uid:"+string(d.UID)] = true
	}
	var cm corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: changeNS, Name: "web-config"}, &cm); err != nil {
		return nil, fmt.Errorf("configmap web-config: %w", err)
	}
	cm.Data["mode"] = "amber"
	if err := c.Update(ctx, &cm); err != nil {
		return nil, fmt.Errorf("editing configmap web-config: %w", err)
	}
	touched["uid:"+string(cm.UID)] = true
	for _, gone := range []struct {
		obj  client.Object
		name string
	}{{&corev1.ConfigMap{}, "worker-config"}, {&corev1.Service{}, "api"}} {
		if err := c.Get(ctx, client.ObjectKey{Namespace: changeNS, Name: gone.name}, gone.obj); err != nil {
			return nil, fmt.Errorf("%s: %w", gone.name, err)
		}
		if err := c.Delete(ctx, gone.obj); err != nil {
			return nil, fmt.Errorf("deleting %s: %w", gone.name, err)
		}
		touched["uid:"+string(gone.obj.GetUID())] = true
	}
	return touched, nil
}

// eventSink reports whether a sink under test is an event sink: those write exactly the rows
// that changed while the agent was down (docs/sinks/events.md, "Agent restarts").
func eventSink(s *sinkUnderTest) bool { return s.typ == "kafka" || s.typ == "nats" }

// assertOnlyTouched fails for every event sink whose write markers moved between start and end
// other than those of the touched rows, the state and the server-side counters, or whose
// touched rows' markers did not all move; other sinks' moves are logged.
func assertOnlyTouched(t *testing.T, sinks []*sinkUnderTest, start, end map[string]map[string]string, touched map[string]bool, what string) {
	t.Helper()
	for _, s := range sinks {
		moved := changedUnits(start[s.name], end[s.name])
		var bad []string
		rows := 0
		for _, k := range moved {
			if strings.HasPrefix(k, "uid:") && touched[k] {
				rows++
			}
			if !allowedToChange(k, touched) {
				bad = append(bad, fmt.Sprintf("%s: %q -> %q", k, start[s.name][k], end[s.name][k]))
			}
		}
		switch {
		case !eventSink(s):
			if len(bad) > 0 {
				t.Logf("%s: %s (%s) also rewrote (not asserted for this sink):\n  %s", what, s.name, s.client, strings.Join(bad, "\n  "))
			}
		case len(bad) > 0:
			t.Errorf("%s: %s (%s) wrote more than the %d rows that changed:\n  %s", what, s.name, s.client, len(touched), strings.Join(bad, "\n  "))
		case rows != len(touched):
			t.Errorf("%s: %s (%s) wrote %d of the %d rows that changed: markers moved %v", what, s.name, s.client, rows, len(touched), moved)
		default:
			var counters []string
			for _, k := range moved {
				if strings.HasPrefix(k, "counter:") {
					counters = append(counters, fmt.Sprintf("%s %q -> %q", k, start[s.name][k], end[s.name][k]))
				}
			}
			t.Logf("%s: %s (%s) wrote exactly the %d rows that changed (%d write markers moved; %s)", what, s.name, s.client, rows,
				len(moved), strings.Join(counters, ", "))
		}
	}
}
