package fleet

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"
	"kollect.dev/testenv"
)

// checkLocalDeletionAndMetadataDrift: on a cluster holding the bundle of TestFleet, a
// hub-managed object deleted by hand is re-created, a removed managed-by label, an added label
// and an edited bundle annotation are put back, and each is reported to the hub by name.
func checkLocalDeletionAndMetadataDrift(t *testing.T, admin fleetv1connect.FleetServiceClient, cp *testenv.ControlPlane) {
	t.Helper()
	ctx := context.Background()
	c := cp.Client

	// Deleted by hand: re-created with the bundle's spec.
	inv := &kollectv1.KollectClusterInventory{}
	if err := c.Get(ctx, client.ObjectKey{Name: "fleet"}, inv); err != nil {
		t.Fatal(err)
	}
	oldUID := inv.UID
	if err := c.Delete(ctx, inv); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the deleted inventory re-created", func() (bool, string) {
		got := &kollectv1.KollectClusterInventory{}
		if err := c.Get(ctx, client.ObjectKey{Name: "fleet"}, got); err != nil {
			return false, err.Error()
		}
		return got.UID != oldUID && got.DeletionTimestamp == nil && got.Spec.Debounce.Duration == time.Second,
			fmt.Sprintf("uid %s (old %s), deleting %v, debounce %s", got.UID, oldUID, got.DeletionTimestamp, got.Spec.Debounce)
	})
	waitReported(t, admin, cp.Name, "KollectClusterInventory", "fleet", "deleted locally; re-created")

	// The managed-by label removed by hand: put back, not dropped from management.
	prof := client.ObjectKey{Namespace: "kollect-fleet", Name: "configmaps"}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"kollect.dev/managed-by":null}}}`))
	if err := c.Patch(ctx, &kollectv1.KollectProfile{ObjectMeta: objectMeta(prof)}, patch, client.FieldOwner("kubectl-label")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the managed-by label put back", func() (bool, string) {
		got := &kollectv1.KollectProfile{}
		if err := c.Get(ctx, prof, got); err != nil {
			return false, err.Error()
		}
		return got.Labels["kollect.dev/managed-by"] == "kollect-hub", fmt.Sprint(got.Labels)
	})
	waitReported(t, admin, cp.Name, "KollectProfile", "configmaps", "label kollect.dev/managed-by removed locally")

	// A label added and a bundle annotation edited by hand: both reverted, local-only
	// annotations kept.
	target := client.ObjectKey{Name: "configmaps"}
	patch = client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"intruder"},`+
		`"annotations":{"kollect.dev/bundle-revision":"999","note.example.com/local":"kept"}}}`))
	if err := c.Patch(ctx, &kollectv1.KollectClusterTarget{ObjectMeta: objectMeta(target)}, patch, client.FieldOwner("kubectl-annotate")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the label and annotation reverted", func() (bool, string) {
		got := &kollectv1.KollectClusterTarget{}
		if err := c.Get(ctx, target, got); err != nil {
			return false, err.Error()
		}
		_, intruder := got.Labels["team"]
		rev := got.Annotations["kollect.dev/bundle-revision"]
		return !intruder && rev != "999" && rev != "" && got.Annotations["note.example.com/local"] == "kept",
			fmt.Sprintf("labels %v annotations %v", got.Labels, got.Annotations)
	})
	waitReported(t, admin, cp.Name, "KollectClusterTarget", "configmaps", `labels changed by "kubectl-annotate" (+team)`)
	waitReported(t, admin, cp.Name, "KollectClusterTarget", "configmaps", "annotations kollect.dev/bundle-revision changed")

	// After the reverts the hub shows the cluster in sync again.
	eventually(t, 30*time.Second, "the cluster in sync", func() (bool, string) {
		got, err := admin.GetCluster(ctx, connect.NewRequest(&fleetv1.GetClusterRequest{Name: cp.Name}))
		if err != nil {
			return false, err.Error()
		}
		return got.Msg.GetCluster().GetConfigInSync(), got.Msg.GetCluster().String()
	})
}

// waitReported waits for the cluster's heartbeat to report a revert of kind/name whose
// message contains want.
func waitReported(t *testing.T, admin fleetv1connect.FleetServiceClient, cluster, kind, name, want string) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("%s %s reported %q", kind, name, want), func() (bool, string) {
		c, err := admin.GetCluster(context.Background(), connect.NewRequest(&fleetv1.GetClusterRequest{Name: cluster}))
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, b := range c.Msg.GetStatus().GetBundles() {
			for _, o := range b.GetObjects() {
				if o.GetObject().GetKind() != kind || o.GetObject().GetName() != name {
					continue
				}
				seen = append(seen, o.GetResult().String()+": "+o.GetMessage())
				if o.GetResult() == fleetv1.ApplyResult_APPLY_RESULT_DRIFT_REVERTED && strings.Contains(o.GetMessage(), want) {
					return true, ""
				}
			}
		}
		return false, strings.Join(seen, "; ")
	})
}

func objectMeta(k client.ObjectKey) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}
}
