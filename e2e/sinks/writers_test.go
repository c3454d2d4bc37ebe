package sinks

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// TestTwoAgentsOneClusterName: two clusters (two control planes, so two kube-system UIDs and
// two agent instances) whose shipped agents were both given --cluster-name east export the
// same inventory to one PostgreSQL. The first exports; once the second starts, within one
// confirm interval both inventories report Degraded=True reason WriterConflict naming the
// other's instance and version, both agents' kollect_export_writer_conflict reads 1, and
// psql shows exactly the first cluster's rows, none rewritten (xmin), and the state naming
// the first agent with the second as its contender.
func TestTwoAgentsOneClusterName(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var (
		cps [2]*testenv.ControlPlane
		pg  *testenv.Postgres
	)
	start := func(i int) func() error {
		return func() (err error) {
			if cps[i], err = testenv.Start(fmt.Sprintf("writer-%d", i+1), testenv.Options{}); err == nil {
				t.Cleanup(func() { _ = testenv.StopAll([]*testenv.ControlPlane{cps[i]}) })
			}
			return err
		}
	}
	must(t, parallel(start(0), start(1), func() (err error) {
		if pg, err = testenv.StartPostgres(); err == nil {
			t.Cleanup(pg.Stop)
		}
		return err
	}))
	pgURL, err := pg.CreateDatabase(ctx, pgDatabase)
	must(t, err)
	pgs := postgresSink(pg, pgURL)
	version, err := testenv.Version()
	must(t, err)
	var uids [2]string
	for i, cp := range cps {
		c := cp.Client
		must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sinkNS}}))
		must(t, seedWorkloads(ctx, c))
		must(t, applyYAML(ctx, c, kollectConfig))
		must(t, applyYAML(ctx, c, pgs.manifest))
		inv := newInventory(kollectv1.ClusterSinkReferences{Database: []kollectv1.NamespacedObjectReference{{Name: "postgres", Namespace: sinkNS}}})
		inv.Spec.ConfirmInterval = &metav1.Duration{Duration: confirmEvery}
		inv.Spec.ResyncInterval = nil
		must(t, c.Create(ctx, inv))
		ks := &corev1.Namespace{}
		must(t, c.Get(ctx, client.ObjectKey{Name: "kube-system"}, ks))
		uids[i] = string(ks.UID)
	}
	if uids[0] == uids[1] {
		t.Fatalf("both control planes have kube-system UID %s: the agents would be one instance", uids[0])
	}

	first := newAgent(t, cps[0])
	first.start()
	want, err := expectedRows(ctx, cps[0].Client)
	must(t, err)
	waitRows(t, ctx, []*sinkUnderTest{pgs}, want, "the first agent's export")
	db := &pgReader{url: pgURL}
	rowMarks := func() string {
		out, err := db.psql(ctx, `SELECT string_agg(uid || '@' || xmin::text, ',' ORDER BY uid) FROM kollect.rows`)
		must(t, err)
		return strings.TrimSpace(out)
	}
	before := rowMarks()
	if !strings.Contains(before, "@") {
		t.Fatalf("no rows after the first export: %q", before)
	}

	second := newAgent(t, cps[1])
	second.start()
	startedAt := time.Now()
	// conflict returns the inventory's Degraded condition when it is WriterConflict.
	conflict := func(c client.Client) (*metav1.Condition, string) {
		var inv kollectv1.KollectClusterInventory
		must(t, c.Get(ctx, client.ObjectKey{Name: inventory}, &inv))
		d := apimeta.FindStatusCondition(inv.Status.Conditions, kollectv1.ConditionDegraded)
		desc := fmt.Sprintf("conditions %+v, sinks %+v", inv.Status.Conditions, inv.Status.Sinks)
		if d == nil || d.Status != metav1.ConditionTrue || d.Reason != kollectv1.ReasonWriterConflict {
			return nil, desc
		}
		if s := sinkStatus(inv, "postgres"); s.LastError == "" {
			return nil, desc
		}
		return d, desc
	}
	var seen [2]*metav1.Condition
	var seenAt [2]time.Time
	var last [2]string
	for deadline := startedAt.Add(confirmEvery + 30*time.Second); seen[0] == nil || seen[1] == nil; time.Sleep(250 * time.Millisecond) {
		for i, cp := range cps {
			if seen[i] == nil {
				if seen[i], last[i] = conflict(cp.Client); seen[i] != nil {
					seenAt[i] = time.Now()
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s after the second agent started, not both inventories report WriterConflict:\nfirst: %s\nsecond: %s",
				time.Since(startedAt).Round(time.Second), last[0], last[1])
		}
	}
	// The second is refused at its first export; the first learns of it at its next
	// confirmation, at most an interval later (plus the status write's coalescing).
	if gap := seenAt[0].Sub(seenAt[1]); gap > confirmEvery+3*time.Second {
		t.Errorf("the first agent reported the conflict %s after the second: more than one confirm interval (%s)", gap.Round(time.Millisecond), confirmEvery)
	}
	t.Logf("conflict reported %s (second) and %s (first) after the second agent started",
		seenAt[1].Sub(startedAt).Round(time.Millisecond), seenAt[0].Sub(startedAt).Round(time.Millisecond))
	for i, other := range []int{1, 0} {
		msg := seen[i].Message
		if !strings.Contains(msg, "@"+uids[other]) || !strings.Contains(msg, version) || !strings.Contains(msg, "database/postgres") ||
			!strings.Contains(msg, "--cluster-name "+cluster) {
			t.Errorf("agent %d's condition %q does not name the sink, the other instance (…@%s), its version %s and the cluster name",
				i+1, msg, uids[other], version)
		}
	}
	for i, a := range []*agentProc{first, second} {
		samples, err := a.scrape("kollect_export_writer_conflict")
		must(t, err)
		on := 0
		for labels, v := range samples {
			if strings.Contains(labels, "postgres") && v == 1 {
				on++
			}
		}
		if on != 1 {
			t.Errorf("agent %d's kollect_export_writer_conflict: %v, want 1 for the postgres sink", i+1, samples)
		}
	}

	// The sink: the first cluster's rows, not one rewritten, and the first agent's state with
	// the second as its contender. A confirmation of the first after the refusals, observed
	// in the state, closes the window: the second kept being refused through it.
	stateOf := func() (instance, contender string, confirmed float64) {
		out, err := db.psql(ctx, `SELECT agent_instance, contender_instance, extract(epoch FROM confirmed_at) FROM kollect.rows_state`)
		must(t, err)
		if _, err := fmt.Sscanf(strings.TrimSpace(out), "%s\t%s\t%f", &instance, &contender, &confirmed); err != nil {
			t.Fatalf("state row %q: %v", out, err)
		}
		return instance, contender, confirmed
	}
	_, _, c0 := stateOf()
	for deadline := time.Now().Add(confirmEvery + 5*time.Second); ; time.Sleep(250 * time.Millisecond) {
		instance, contender, c := stateOf()
		if !strings.HasSuffix(instance, "@"+uids[0]) || !strings.HasSuffix(contender, "@"+uids[1]) {
			t.Fatalf("the state names writer %q and contender %q, want the first (…@%s) and the second (…@%s)", instance, contender, uids[0], uids[1])
		}
		if c > c0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first agent did not confirm within an interval")
		}
	}
	checkRows(t, ctx, []*sinkUnderTest{pgs}, want, "with two agents named east")
	if after := rowMarks(); after != before {
		t.Errorf("rows were rewritten while two agents ran with one cluster name:\nbefore %s\nafter  %s", before, after)
	}
}
