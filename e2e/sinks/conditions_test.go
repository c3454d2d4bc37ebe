package sinks

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// TestMissingSinkIsNotSyncedAnywhere: the shipped kollect-agent exports an inventory that
// names a PostgreSQL sink and a database sink that does not exist. The positive control is the
// existing sink: psql reads every row. The inventory must then say what docs/operations.md's
// conditions table says for a missing sink — Ready=True, Synced=False SinkInvalid,
// Degraded=True SinkInvalid — never Synced=True beside Degraded=True; the hub's copy of those
// conditions (GetCluster, what the cluster page shows) must say the same, and its freshness
// matrix (GetFleetHealth) must hold an error cell for the missing sink.
func TestMissingSinkIsNotSyncedAnywhere(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var (
		cp  *testenv.ControlPlane
		pg  *testenv.Postgres
		hub *hubProc
	)
	must(t, parallel(controlPlane(t, "missing-sink", &cp), postgresServer(t, &pg),
		func() (err error) { hub, err = startHub(t); return err },
	))
	pgURL, err := pg.CreateDatabase(ctx, pgDatabase)
	must(t, err)
	c := cp.Client
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sinkNS}}))
	must(t, seedWorkloads(ctx, c))
	must(t, applyYAML(ctx, c, kollectConfig))
	pgs := postgresSink(pg, pgURL)
	must(t, applyYAML(ctx, c, pgs.manifest))
	const absent = "absent"
	inv := newInventory(kollectv1.ClusterSinkReferences{Database: []kollectv1.NamespacedObjectReference{
		{Name: "postgres", Namespace: sinkNS}, {Name: absent, Namespace: sinkNS}}})
	must(t, c.Create(ctx, inv))
	a := newAgent(t, cp)
	a.args, err = hub.agentFlags(ctx, c)
	must(t, err)
	a.start()

	want, err := expectedRows(ctx, c)
	must(t, err)
	waitRows(t, ctx, []*sinkUnderTest{pgs}, want, "the export to the sink that exists")

	wantConds := map[string]string{
		kollectv1.ConditionReady:    "True " + kollectv1.ReasonSnapshotReady,
		kollectv1.ConditionSynced:   "False " + kollectv1.ReasonSinkInvalid,
		kollectv1.ConditionDegraded: "True " + kollectv1.ReasonSinkInvalid,
	}
	same := func(got map[string]string) string {
		for typ, w := range wantConds {
			if got[typ] != w {
				return fmt.Sprintf("%s is %q, want %q (all: %v)", typ, got[typ], w, got)
			}
		}
		return ""
	}
	eventuallyT(t, 2*time.Minute, "the inventory's conditions for a missing sink", func() (bool, string) {
		fresh := &kollectv1.KollectClusterInventory{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(inv), fresh); err != nil {
			return false, err.Error()
		}
		got := map[string]string{}
		for typ := range wantConds {
			if cond := apimeta.FindStatusCondition(fresh.Status.Conditions, typ); cond != nil {
				got[typ] = string(cond.Status) + " " + cond.Reason
			}
		}
		msg := same(got)
		return msg == "", msg
	})

	// The hub: the heartbeat's copy of the inventory's conditions, and the freshness cell.
	eventuallyT(t, time.Minute, "the hub's view of the inventory and of the missing sink", func() (bool, string) {
		var view struct {
			Status struct {
				Inventories []struct {
					Name       string
					Conditions []struct{ Type, Status, Reason string }
				}
			}
		}
		if err := hub.call(ctx, "GetCluster", map[string]string{"name": cluster}, &view); err != nil {
			return false, err.Error()
		}
		got := map[string]string{}
		for _, i := range view.Status.Inventories {
			if i.Name != inventory {
				continue
			}
			for _, cond := range i.Conditions {
				got[cond.Type] = cond.Status + " " + cond.Reason
			}
		}
		if msg := same(got); msg != "" {
			return false, "GetCluster: " + msg
		}
		var health struct {
			ExportFreshness []struct {
				Cluster, SinkName, LastError string
				SinkNotFound                 bool
			}
		}
		if err := hub.call(ctx, "GetFleetHealth", map[string]any{}, &health); err != nil {
			return false, err.Error()
		}
		for _, f := range health.ExportFreshness {
			if f.Cluster == cluster && f.SinkName == absent {
				return f.SinkNotFound && f.LastError != "", fmt.Sprintf("freshness cell: %+v", f)
			}
		}
		return false, fmt.Sprintf("no freshness cell for sink %s: %+v", absent, health.ExportFreshness)
	})
}
