package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/sink"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// TestDestinationChangedWhileAgentDownGetsFullExport is issue 18 point 2: what the agent
// remembers (the accepted checksum in the inventory status) belongs to a destination, not to a
// sink name. With the agent stopped, a snapshot sink's repository and path template, a database
// sink's table and an event sink's subject are edited, and one snapshot sink is deleted and
// re-created under the same name: after the restart each of them gets a full export although
// the data did not change. A sink whose only edit is its timeout is the same destination and
// gets nothing.
func TestDestinationChangedWhileAgentDownGetsFullExport(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "destination")
	ctx := context.Background()
	create(t, configMap(ns, "a", map[string]string{"color": "red"}))
	objs := configMapInventory(ns, 200*time.Millisecond, time.Second)
	inv := objs[3].(*kollectv1.KollectInventory)
	inv.Spec.Sinks = kollectv1.SinkReferences{
		Snapshot: []kollectv1.LocalObjectReference{{Name: "snap"}, {Name: "again"}, {Name: "steady"}},
		Database: []kollectv1.LocalObjectReference{{Name: "db"}},
		Event:    []kollectv1.LocalObjectReference{{Name: "ev"}},
	}
	gitSink := func(name, url string) *kollectv1.KollectSnapshotSink {
		return &kollectv1.KollectSnapshotSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: kollectv1.KollectSnapshotSinkSpec{
			Type: kollectv1.SnapshotSinkGit, Git: &kollectv1.GitSinkConfig{URL: url}, Timeout: metav1.Duration{Duration: 10 * time.Second},
		}}
	}
	create(t, objs[0], objs[1], inv,
		gitSink("snap", "file:///srv/a.git"), gitSink("again", "file:///srv/again.git"), gitSink("steady", "file:///srv/steady.git"),
		&kollectv1.KollectDatabaseSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}, Spec: kollectv1.KollectDatabaseSinkSpec{
			Type: kollectv1.DatabaseSinkPostgres, Postgres: &kollectv1.PostgresSinkConfig{Host: "127.0.0.1", Database: "inv", Table: "rows",
				SecretRef: kollectv1.SecretReference{Name: "pg"}},
		}},
		&kollectv1.KollectEventSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ev"}, Spec: kollectv1.KollectEventSinkSpec{
			Type: kollectv1.EventSinkNATS, NATS: &kollectv1.NATSSinkConfig{Servers: []string{"nats://127.0.0.1:4222"}, SubjectTemplate: "kollect.{cluster}"},
		}},
	)
	names := []string{"snap", "again", "steady", "db", "ev"}
	recs := &recorders{}
	synced := func(what string) {
		eventually(t, 30*time.Second, what, func() (bool, string) {
			got := &kollectv1.KollectInventory{}
			_ = cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "inv"}, got)
			c := apimeta.FindStatusCondition(got.Status.Conditions, kollectv1.ConditionSynced)
			ok := c != nil && c.Status == metav1.ConditionTrue && len(got.Status.Sinks) == len(names)
			for _, s := range got.Status.Sinks {
				ok = ok && s.Checksum == got.Status.Checksum && s.Checksum != "" && s.Destination != ""
			}
			return ok, fmt.Sprintf("%+v", got.Status)
		})
	}
	stop := startAgent(t, nil, "c1", ns, recs)
	synced("every sink holds the snapshot")
	stop()
	before := map[string]int{}
	for _, n := range names {
		before[n] = len(recs.get(ns + "/" + n).Batches())
		if before[n] == 0 {
			t.Fatalf("sink %s got no first export", n)
		}
	}

	// While the agent is down: new destinations everywhere but on steady.
	edit := func(obj client.Object, change func()) {
		t.Helper()
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			t.Fatal(err)
		}
		change()
		if err := cp.Client.Update(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	snap := &kollectv1.KollectSnapshotSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap"}}
	edit(snap, func() {
		snap.Spec.Git.URL = "file:///srv/b.git"
		snap.Spec.Layout.PathTemplate = "fleet/{cluster}"
	})
	steady := &kollectv1.KollectSnapshotSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "steady"}}
	edit(steady, func() { steady.Spec.Timeout = metav1.Duration{Duration: 20 * time.Second} })
	db := &kollectv1.KollectDatabaseSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}}
	edit(db, func() { db.Spec.Postgres.Table = "rows_v2" })
	ev := &kollectv1.KollectEventSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ev"}}
	edit(ev, func() { ev.Spec.NATS.SubjectTemplate = "inventory.{cluster}" })
	if err := cp.Client.Delete(ctx, gitSink("again", "")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the deleted sink gone", func() (bool, string) {
		err := cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "again"}, &kollectv1.KollectSnapshotSink{})
		return err != nil, fmt.Sprint(err)
	})
	create(t, gitSink("again", "file:///srv/again.git"))

	startAgent(t, nil, "c1", ns, recs)
	for _, n := range []string{"snap", "again", "db", "ev"} {
		rec := recs.get(ns + "/" + n)
		if !rec.WaitFor(30*time.Second, func(b []*sink.Batch) bool { return len(b) > before[n] }) {
			t.Errorf("sink %s: its new destination got no export after the restart", n)
			continue
		}
		if last := rec.Last(); !last.Diff.Full || last.PreviousChecksum != "" || len(last.Envelope.Rows) != 1 {
			t.Errorf("sink %s: export to the new destination full=%v previous=%q rows=%d, want a full export of 1 row",
				n, last.Diff.Full, last.PreviousChecksum, len(last.Envelope.Rows))
		}
	}
	if t.Failed() {
		return
	}
	synced("every sink holds the snapshot after the restart")
	if got := len(recs.get(ns+"/steady").Batches()) - before["steady"]; got != 0 {
		t.Fatalf("sink steady (only its timeout edited) was exported %d times", got)
	}
}
