package apiserver

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// TestTenantsConfinedByDefault runs the shipped kollect-agent with its default flags: a
// namespace without a KollectScope may do nothing (its target and inventory say why, the agent
// made no export call and the repository has no commit) until the platform's KollectScope
// arrives, and then its rows land. Run open (--tenant-mode=false, the documented single-team
// setting), a KollectTarget that reaches beyond its own namespace without a scope granting it
// is refused all the same.
func TestTenantsConfinedByDefault(t *testing.T) {
	t.Parallel() // its own control plane
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, err := testenv.Start("tenancy", testenv.Options{})
	must(t, err)
	t.Cleanup(func() { _ = cp.Stop() })
	c := cp.Client

	repo := setupNamespace(t, ctx, c, "confined", 2)
	grant := &kollectv1.KollectScope{}
	must(t, c.Get(ctx, client.ObjectKey{Namespace: "confined", Name: "team"}, grant))
	must(t, c.Delete(ctx, grant))
	head, err := git(ctx, repo, "rev-parse", "main")
	must(t, err)
	agent := startReplica(t, cp, "confined", "confined-0") // no --tenant-mode: the default

	target := &kollectv1.KollectTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "confined", Name: "cm"}}
	waitCondition(t, ctx, c, target, func() []metav1.Condition { return target.Status.Conditions },
		kollectv1.ReasonScopeMissing, "tenant mode: namespace confined has no KollectScope, so nothing is allowed")
	inv := &kollectv1.KollectInventory{ObjectMeta: metav1.ObjectMeta{Namespace: "confined", Name: "inv"}}
	waitCondition(t, ctx, c, inv, func() []metav1.Condition { return inv.Status.Conditions },
		kollectv1.ReasonScopeMissing, "tenant mode: namespace confined has no KollectScope")
	if n, err := agent.exports(); err != nil || n != 0 {
		t.Fatalf("the agent made %v export calls (%v) for a namespace without a KollectScope", n, err)
	}
	if now, err := git(ctx, repo, "rev-parse", "main"); err != nil || now != head {
		t.Fatalf("the repository of a namespace without a KollectScope moved from %s to %s (%v)", head, now, err)
	}

	// The platform team grants the namespace its scope: the rows arrive.
	grant.ObjectMeta = metav1.ObjectMeta{Namespace: "confined", Name: "team"}
	must(t, c.Create(ctx, grant))
	waitRows(t, ctx, repo, []string{"seed-0", "seed-1"}, time.Minute, "rows once the scope is granted")

	// Open mode: still no KollectTarget outside its own namespace without a grant.
	setupNamespace(t, ctx, c, "open-a", 1)
	setupNamespace(t, ctx, c, "open-b", 1)
	for _, ns := range []string{"open-a", "open-b"} {
		must(t, c.DeleteAllOf(ctx, &kollectv1.KollectScope{}, client.InNamespace(ns)))
	}
	wide := &kollectv1.KollectTarget{}
	must(t, c.Get(ctx, client.ObjectKey{Namespace: "open-b", Name: "cm"}, wide))
	wide.Spec.Namespaces = &kollectv1.NamespaceSelection{Include: []string{"open-a", "open-b"}}
	must(t, c.Update(ctx, wide))
	startReplica(t, cp, "open-b", "open-0", "--namespaces=open-a,open-b", "--tenant-mode=false")
	waitCondition(t, ctx, c, wide, func() []metav1.Condition { return wide.Status.Conditions },
		kollectv1.ReasonScopeNamespaceDenied,
		"a KollectTarget collects only from its own namespace open-b unless a KollectScope or KollectClusterScope allows more")
	own := &kollectv1.KollectTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "open-a", Name: "cm"}}
	eventuallyTrue(t, ctx, "open-a's own target collects without a scope", func() (bool, string) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(own), own); err != nil {
			return false, err.Error()
		}
		return own.Status.ObjectCount == 1, fmt.Sprintf("%+v", own.Status)
	})
}

// waitCondition waits until obj's Degraded condition is True with reason and a message holding
// want.
func waitCondition(t *testing.T, ctx context.Context, c client.Client, obj client.Object, conds func() []metav1.Condition, reason, want string) {
	t.Helper()
	eventuallyTrue(t, ctx, fmt.Sprintf("%s Degraded %s", obj.GetName(), reason), func() (bool, string) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, err.Error()
		}
		d := apimeta.FindStatusCondition(conds(), kollectv1.ConditionDegraded)
		if d == nil || d.Status != metav1.ConditionTrue || d.Reason != reason || !strings.Contains(d.Message, want) {
			return false, fmt.Sprintf("%+v", conds())
		}
		return true, ""
	})
}

func eventuallyTrue(t *testing.T, ctx context.Context, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	last := ""
	for time.Now().Before(deadline) && ctx.Err() == nil {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s: not within 60s; last: %s", what, last)
}
