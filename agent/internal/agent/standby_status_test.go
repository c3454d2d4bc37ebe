package agent

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// TestObjectsSeenAsStandbyGetStatusOnceElected: a replica that starts while the Lease is still
// held by a pod that is gone (a reinstall, a rolling update) sees the team's new objects as a
// standby, which writes no status. Once it takes the Lease it must write their status: nothing
// else will make it look at them again.
func TestObjectsSeenAsStandbyGetStatusOnceElected(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "standby-status")
	now := metav1.NewMicroTime(time.Now())
	create(t, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kollect-agent"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr("a-deleted-pod"), LeaseDurationSeconds: ptr[int32](8),
			AcquireTime: &now, RenewTime: &now}})
	runReplica(t, ns, &recorders{})
	objs := configMapInventory(ns, 200*time.Millisecond, time.Second)
	create(t, objs...)
	eventually(t, 30*time.Second, "the replica holding the Lease", func() (bool, string) {
		h, _ := holder(t, ns)
		return h != "" && h != "a-deleted-pod", h
	})
	eventually(t, 15*time.Second, "the profile's and the target's Ready conditions", func() (bool, string) {
		p := &kollectv1.KollectProfile{}
		tg := &kollectv1.KollectTarget{}
		_ = cp.Client.Get(context.Background(), client.ObjectKeyFromObject(objs[0]), p)
		_ = cp.Client.Get(context.Background(), client.ObjectKeyFromObject(objs[1]), tg)
		pr := apimeta.FindStatusCondition(p.Status.Conditions, kollectv1.ConditionReady)
		tr := apimeta.FindStatusCondition(tg.Status.Conditions, kollectv1.ConditionReady)
		return pr != nil && tr != nil, "profile " + condString(pr) + ", target " + condString(tr)
	})
}

func condString(c *metav1.Condition) string {
	if c == nil {
		return "no Ready condition"
	}
	return string(c.Status) + " " + c.Reason
}
