package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/sink"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// TestNamespaceSelectorFollowsNamespaceLabels: a target selecting namespaces by label picks up
// a namespace as soon as it is labelled, without any change to the objects in it.
func TestNamespaceSelectorFollowsNamespaceLabels(t *testing.T) {
	ctx := context.Background()
	sel := fmt.Sprintf("sel-%d", time.Now().UnixNano()%100000)
	home, other := "nssel-home", "nssel-other"
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: home, Labels: map[string]string{"kollect-test": sel}}},
		{ObjectMeta: metav1.ObjectMeta{Name: other}},
	} {
		create(t, ns)
		create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "cm", Labels: map[string]string{"app": sel}},
			Data: map[string]string{"color": ns.Name}})
	}
	// A KollectTarget reaches beyond its own namespace only where a scope allows it.
	setScope(t, home, allowConfigMaps("*"))
	objs := configMapInventory(home, 200*time.Millisecond, time.Second)
	tgt := objs[1].(*kollectv1.KollectTarget)
	tgt.Spec.LabelSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": sel}}
	tgt.Spec.Namespaces = &kollectv1.NamespaceSelection{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"kollect-test": sel}}}
	create(t, objs...)

	recs := &recorders{}
	// All namespaces: the target reaches beyond its own.
	startAgentWith(t, nil, "c1", "", recs.factories())
	rec := recs.get(home + "/rec")
	namespaces := func(b []*sink.Batch) string {
		if len(b) == 0 {
			return ""
		}
		var ns []string
		for _, r := range b[len(b)-1].Envelope.Rows {
			ns = append(ns, r.Namespace)
		}
		return strings.Join(ns, ",")
	}
	if !rec.WaitFor(30*time.Second, func(b []*sink.Batch) bool { return namespaces(b) == home }) {
		t.Fatalf("rows from %q, want only %s", namespaces(rec.Batches()), home)
	}
	ns := &corev1.Namespace{}
	if err := cp.Client.Get(ctx, client.ObjectKey{Name: other}, ns); err != nil {
		t.Fatal(err)
	}
	ns.Labels = map[string]string{"kollect-test": sel}
	if err := cp.Client.Update(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if !rec.WaitFor(20*time.Second, func(b []*sink.Batch) bool { return namespaces(b) == home+","+other }) {
		t.Fatalf("after labelling %s: rows from %q", other, namespaces(rec.Batches()))
	}
}
