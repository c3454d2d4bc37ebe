package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/sink"
	kollectv1 "kollect.dev/api/v1alpha1"
)

func condition(t *testing.T, obj client.Object, conds func() []metav1.Condition, typ string) *metav1.Condition {
	t.Helper()
	if err := cp.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
		return nil
	}
	return apimeta.FindStatusCondition(conds(), typ)
}

func inventoryFor(ns, name string, targets []string, debounce time.Duration) *kollectv1.KollectInventory {
	inv := &kollectv1.KollectInventory{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: kollectv1.KollectInventorySpec{
		Sinks:        kollectv1.SinkReferences{Snapshot: []kollectv1.LocalObjectReference{{Name: "rec"}}},
		ExportTiming: kollectv1.ExportTiming{Debounce: metav1.Duration{Duration: debounce}, MaxDelay: metav1.Duration{Duration: 5 * debounce}},
	}}
	for _, t := range targets {
		inv.Spec.Targets = append(inv.Spec.Targets, kollectv1.LocalObjectReference{Name: t})
	}
	return inv
}

func profileTarget(ns, name string, gvk kollectv1.GroupVersionKind, attrs ...kollectv1.Attribute) []client.Object {
	return []client.Object{
		&kollectv1.KollectProfile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: kollectv1.KollectProfileSpec{Target: gvk, Attributes: attrs}},
		&kollectv1.KollectTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: kollectv1.KollectTargetSpec{ProfileRef: kollectv1.LocalObjectReference{Name: name}}},
	}
}

func recordingSink(ns string) client.Object {
	return &kollectv1.KollectSnapshotSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rec"}, Spec: kollectv1.KollectSnapshotSinkSpec{
		Type: kollectv1.SnapshotSinkGit, Git: &kollectv1.GitSinkConfig{URL: "file:///unused"}}}
}

// TestCRDInstalledAfterAgentStartIsPickedUp: a target of an unknown kind waits with
// KindNotFound, and collects as soon as the CRD is installed.
func TestCRDInstalledAfterAgentStartIsPickedUp(t *testing.T) {
	ns := namespace(t, "latecrd")
	gvk := kollectv1.GroupVersionKind{Group: "shop.kollect.test", Version: "v1", Kind: "Widget"}
	create(t, profileTarget(ns, "widgets", gvk, kollectv1.Attribute{Name: "size", JSONPath: "{.spec.size}", Type: kollectv1.AttributeInt})...)
	create(t, recordingSink(ns), inventoryFor(ns, "inv", []string{"widgets"}, 200*time.Millisecond))
	recs := &recorders{}
	startAgent(t, nil, "c1", ns, recs)

	target := &kollectv1.KollectTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "widgets"}}
	eventually(t, 20*time.Second, "KindNotFound", func() (bool, string) {
		c := condition(t, target, func() []metav1.Condition { return target.Status.Conditions }, kollectv1.ConditionReady)
		return c != nil && c.Reason == "KindNotFound", fmt.Sprint(c)
	})

	installCRD(t, "shop.kollect.test", "Widget", "widgets")
	w := &unstructured.Unstructured{}
	w.SetAPIVersion("shop.kollect.test/v1")
	w.SetKind("Widget")
	w.SetNamespace(ns)
	w.SetName("blue")
	_ = unstructured.SetNestedField(w.Object, int64(42), "spec", "size")
	create(t, w)

	rec := recs.get(ns + "/rec")
	if !rec.WaitFor(40*time.Second, func(b []*sink.Batch) bool {
		return len(b) > 0 && len(b[len(b)-1].Envelope.Rows) == 1
	}) {
		t.Fatal("the CRD's objects were never exported")
	}
	if r := rec.Last().Envelope.Rows[0]; r.Kind != "Widget" || r.Group != "shop.kollect.test" || string(r.Attributes) != `{"size":42}` {
		t.Fatalf("row %+v", r)
	}
}

func ptr[T any](v T) *T { return &v }

// installCRD creates a namespaced CRD served at v1 whose objects keep any field, and waits
// until it is served.
func installCRD(t *testing.T, group, kind, plural string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Singular: strings.ToLower(kind), Kind: kind, ListKind: kind + "List"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr(true)}}}},
		},
	}
	create(t, crd)
	if err := cp.WaitForCRDs(context.Background(), []*apiextensionsv1.CustomResourceDefinition{crd}); err != nil {
		t.Fatal(err)
	}
	return crd
}

// TestForbiddenKindIsAConditionNotADeletion: an agent that may not list a kind reports it on the
// target and the inventory, and never exports a snapshot without that kind's rows.
// ServiceAccounts are the forbidden kind (grantConfigMapsOnly leaves them out): a profile on
// Secrets reads only namespaces opted in to Secret extraction, which is not what this is about.
func TestForbiddenKindIsAConditionNotADeletion(t *testing.T) {
	ns := namespace(t, "forbidden")
	create(t,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sa1"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c1"}})
	create(t, profileTarget(ns, "accounts", kollectv1.GroupVersionKind{Version: "v1", Kind: "ServiceAccount"},
		kollectv1.Attribute{Name: "name", JSONPath: "{.metadata.name}"})...)
	create(t, profileTarget(ns, "cms", kollectv1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
		kollectv1.Attribute{Name: "name", CEL: "object.metadata.name"})...)
	create(t, recordingSink(ns), inventoryFor(ns, "inv", []string{"cms", "accounts"}, 200*time.Millisecond))
	// A control: an inventory of the permitted kind alone, with the same debounce, on the same
	// agent. Its exports show when the agent has built what a change caused.
	ctl := inventoryFor(ns, "ctl", []string{"cms"}, 200*time.Millisecond)
	ctl.Spec.Sinks.Snapshot[0].Name = "ctl-rec"
	ctlSink := recordingSink(ns)
	ctlSink.SetName("ctl-rec")
	create(t, ctlSink, ctl)

	// A fully privileged agent exports both kinds and records the checksum in status.
	recs := &recorders{}
	stop := startAgent(t, nil, "c1", ns, recs)
	rec := recs.get(ns + "/rec")
	if !rec.WaitFor(30*time.Second, func(b []*sink.Batch) bool { return len(b) > 0 && len(b[len(b)-1].Envelope.Rows) == 2 }) {
		t.Fatal("first agent did not export both rows")
	}
	inv := &kollectv1.KollectInventory{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "inv"}}
	eventually(t, 10*time.Second, "status with checksum", func() (bool, string) {
		_ = cp.Client.Get(context.Background(), client.ObjectKeyFromObject(inv), inv)
		return len(inv.Status.Sinks) == 1 && inv.Status.Sinks[0].Checksum != "", fmt.Sprint(inv.Status.Sinks)
	})
	stop()
	n := len(rec.Batches())

	// The same agent without permission on ServiceAccounts.
	cfg, err := cp.AddUser("kollect-restricted")
	if err != nil {
		t.Fatal(err)
	}
	grantConfigMapsOnly(t, "kollect-restricted")
	startAgent(t, cfg, "c1", ns, recs)

	target := &kollectv1.KollectTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "accounts"}}
	eventually(t, 30*time.Second, "target Forbidden", func() (bool, string) {
		c := condition(t, target, func() []metav1.Condition { return target.Status.Conditions }, kollectv1.ConditionReady)
		return c != nil && c.Reason == "Forbidden", fmt.Sprint(c)
	})
	eventually(t, 10*time.Second, "inventory Degraded=Forbidden", func() (bool, string) {
		c := condition(t, inv, func() []metav1.Condition { return inv.Status.Conditions }, kollectv1.ConditionDegraded)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == "Forbidden", fmt.Sprint(c)
	})
	// This agent has no earlier rows of the accounts (a new cache directory): the export
	// waits, and the coverage counts no rows of them in its snapshot.
	eventually(t, 10*time.Second, "status.coverage says accounts are forbidden", func() (bool, string) {
		_ = cp.Client.Get(context.Background(), client.ObjectKeyFromObject(inv), inv)
		for _, c := range inv.Status.Coverage {
			if c.Target == ns+"/accounts" {
				return c.State == kollectv1.CoverageForbidden && c.Reason != "", fmt.Sprintf("%+v", c)
			}
		}
		return false, fmt.Sprintf("%+v", inv.Status.Coverage)
	})
	eventually(t, 10*time.Second, "a Warning event on the target", func() (bool, string) {
		var evs eventsv1.EventList
		_ = cp.Client.List(context.Background(), &evs, client.InNamespace(ns))
		for _, e := range evs.Items {
			if e.Reason == "Forbidden" && e.Regarding.Name == "accounts" && e.Type == corev1.EventTypeWarning {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events", len(evs.Items))
	})
	// A change to the permitted kind still does not publish a snapshot missing the accounts.
	// The window closes when the control has exported the change and then been called for a
	// resync asked after that: two rounds of a debounce loop that saw the same change as the
	// inventory's, which would have exported the snapshot without the accounts in its first.
	ctlRec := recs.get(ns + "/ctl-rec")
	create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c2"}})
	if !ctlRec.WaitFor(30*time.Second, func(b []*sink.Batch) bool { return len(b) > 0 && len(b[len(b)-1].Envelope.Rows) == 2 }) {
		t.Fatalf("the control inventory did not export c2: %s", describeBatches(ctlRec.Batches()))
	}
	awaitResync(t, client.ObjectKeyFromObject(ctl), resyncBatches(ctlRec))
	if got := len(rec.Batches()) - n; got != 0 {
		t.Fatalf("restricted agent exported %d snapshots; last has %d rows", got, len(rec.Last().Envelope.Rows))
	}
}

// grantConfigMapsOnly grants user what an agent needs for ConfigMaps and its own kinds, and
// no other kind: ServiceAccounts are the tests' forbidden kind.
func grantConfigMapsOnly(t *testing.T, user string) {
	t.Helper()
	read := []string{"get", "list", "watch"}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"kollect.dev"}, Resources: []string{"*"}, Verbs: []string{"*"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps", "namespaces"}, Verbs: read},
		{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
	}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: user},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: user, APIGroup: "rbac.authorization.k8s.io"}}}
	create(t, role, binding)
}

func inventoryStatus(o client.Object) kollectv1.KollectInventoryStatus {
	return o.(*kollectv1.KollectInventory).Status
}

// TestProfileRetargetedToUnservedKindTakesInventoryOutOfReady: a profile edited to name a kind
// the cluster does not serve must not leave its inventory Ready on the old rows (staged
// rollouts gate on that condition).
func TestProfileRetargetedToUnservedKindTakesInventoryOutOfReady(t *testing.T) {
	ns := namespace(t, "retarget")
	create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c1"}})
	create(t, profileTarget(ns, "cms", kollectv1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
		kollectv1.Attribute{Name: "name", CEL: "object.metadata.name"})...)
	create(t, recordingSink(ns), inventoryFor(ns, "inv", []string{"cms"}, 200*time.Millisecond))
	recs := &recorders{}
	startAgent(t, nil, "c1", ns, recs)

	inv := &kollectv1.KollectInventory{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "inv"}}
	ready := func() *metav1.Condition {
		return condition(t, inv, func() []metav1.Condition { return inv.Status.Conditions }, kollectv1.ConditionReady)
	}
	eventually(t, 30*time.Second, "inventory Ready", func() (bool, string) {
		c := ready()
		return c != nil && c.Status == metav1.ConditionTrue, fmt.Sprint(c)
	})

	profile := &kollectv1.KollectProfile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cms"}}
	updateObject(t, profile, func() {
		profile.Spec.Target = kollectv1.GroupVersionKind{Group: "nowhere.kollect.test", Version: "v1", Kind: "Gadget"}
	})
	eventually(t, 30*time.Second, "inventory not Ready after the retarget", func() (bool, string) {
		c := ready()
		return c != nil && c.Status == metav1.ConditionFalse, fmt.Sprint(c)
	})
}
