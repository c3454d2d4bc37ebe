package agentbench

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// restartFigures are the restart step's: the agent is stopped with SIGTERM after the static
// window and started again on the same data and cache directory (a container restart).
type restartFigures struct {
	// Back is the time from the new process's start until every inventory reports every
	// target complete (kollect_inventory_target_coverage{state="complete"}); CPU is what the
	// new process spent until then.
	Back, CPU float64
	// Lists are the lists of the seeded kinds the new process sent (kollect_watch_lists_total).
	Lists float64
	RSS   float64
}

// restartControl names the object created in every namespace once the restarted agent is
// back: the positive control that closes the window in which it must export nothing.
const restartControl = "restart-control"

// pgSnapshot is what an export would change in PostgreSQL: every row's xmin (any insert or
// update of a row gives it a new one) but the restart controls', and, with states, every state
// row's checksum and exported_at (a confirmation moves only confirmed_at). Equal snapshots
// before and after a window are server-side evidence that nothing was exported in it.
func pgSnapshot(ctx context.Context, url string, states bool) (string, error) {
	q := fmt.Sprintf(`SELECT (SELECT count(*) || ':' || coalesce(md5(string_agg(xmin::text, ',' ORDER BY xmin::text)), '')
		FROM kollect.rows WHERE cluster = '%[1]s' AND name <> '%[2]s')`, cluster, restartControl)
	if states {
		q += fmt.Sprintf(` || '|' || (SELECT coalesce(md5(string_agg(inventory || '=' || checksum || '@' || exported_at::text,
		',' ORDER BY inventory)), '') FROM kollect.rows_state WHERE cluster = '%[1]s')`, cluster)
	}
	return psql(ctx, url, q)
}

// restart stops the agent and starts it again with the data unchanged: the new process must
// come back (every target complete in every inventory, no exit) and export nothing. The window
// closes on a positive control: once the new process is back, an object of a seeded kind is
// created in every namespace, and the window ends when PostgreSQL holds all of them. An inventory's loop
// handles its rounds in order, so whatever the restart made it export was exported before the
// control's export or with it. The evidence: PostgreSQL unchanged (rows and state rows) from
// before the stop until the controls are created; every row but the controls' with its xmin
// of before the stop once they are exported; and the new process's export calls
// (kollect_export_duration_seconds_count, counted as each call returns) one per inventory,
// the control's.
func restart(b testing.TB, ctx context.Context, a *agentProc, c client.Client, kubeconfig, cacheDir, pgURL string, s shape) restartFigures {
	// The stop comes once the process has recorded every export in its inventory's status,
	// where the next process resumes from: stopped before that, the new one would call the
	// sink again for the checksum it already holds.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		var invs kollectv1.KollectInventoryList
		if err := c.List(ctx, &invs); err != nil {
			b.Fatal(err)
		}
		recorded := 0
		for _, inv := range invs.Items {
			if st := inv.Status; st.Checksum != "" && len(st.Sinks) > 0 && !slices.ContainsFunc(st.Sinks, func(k kollectv1.SinkExportStatus) bool {
				return k.Checksum != st.Checksum
			}) {
				recorded++
			}
		}
		if recorded == s.inventories() {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("after 2 min, %d of %d inventories record their export in their status", recorded, s.inventories())
		}
	}
	before, err := pgSnapshot(ctx, pgURL, true)
	if err != nil {
		b.Fatal(err)
	}
	rowsBefore, err := pgSnapshot(ctx, pgURL, false)
	if err != nil {
		b.Fatal(err)
	}
	if err := a.stop(); err != nil {
		b.Fatalf("kollect-agent did not stop cleanly on SIGTERM: %v\n%s", err, a.logTail(20))
	}
	a2 := startAgent(b, kubeconfig, cacheDir)
	want := s.namespaces * len(s.kindList()) // one target per kind per inventory in both layouts
	deadline := a2.started.Add(5 * time.Minute)
	for {
		if a2.exited() {
			b.Fatalf("the restarted kollect-agent exited before it came back: %v\n%s", a2.waitErr, a2.logTail(40))
		}
		// Until the new process serves /metrics, nothing is complete.
		n, _, _ := a2.tryMetricSum("kollect_inventory_target_coverage", `state="complete"`)
		if int(n) == want {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the restarted kollect-agent did not come back in %s: %d of %d targets complete\n%s",
				time.Since(a2.started).Round(time.Second), int(n), want, a2.logTail(40))
		}
		time.Sleep(200 * time.Millisecond)
	}
	var f restartFigures
	f.Back = time.Since(a2.started).Seconds()
	f.CPU = a2.cpu(b).Seconds()
	f.Lists = s.lists(b, a2)
	if at, err := pgSnapshot(ctx, pgURL, true); err != nil {
		b.Fatal(err)
	} else if at != before {
		b.Fatalf("the restart exported before it came back: PostgreSQL's rows or state rows changed (%s → %s)", before, at)
	}
	controlled := time.Now()
	for i := range s.namespaces {
		obj := s.kindList()[0].object(namespace(i), s.objects+i)
		obj.SetName(restartControl)
		if err := c.Create(ctx, obj); err != nil {
			b.Fatal(err)
		}
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if a2.exited() {
			b.Fatalf("the restarted kollect-agent exited after it came back: %v\n%s", a2.waitErr, a2.logTail(40))
		}
		got, err := psql(ctx, pgURL, fmt.Sprintf(`SELECT count(DISTINCT inventory) FROM kollect.rows WHERE cluster = '%s' AND name = '%s'`, cluster, restartControl))
		if err != nil {
			b.Fatal(err)
		}
		if got == fmt.Sprint(s.inventories()) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the restarted kollect-agent exported the control object to %s of %d inventories in 2 min\n%s", got, s.inventories(), a2.logTail(40))
		}
	}
	f.RSS = a2.memory(b)["VmRSS"]
	after, err := pgSnapshot(ctx, pgURL, false)
	if err != nil {
		b.Fatal(err)
	}
	if after != rowsBefore {
		b.Fatalf("the restart exported: PostgreSQL's rows other than the controls changed (%s → %s)", rowsBefore, after)
	}
	// Each call is counted once it returned; the controls' rows are committed, so theirs have.
	if calls, _ := a2.metricSum(b, "kollect_export_duration_seconds_count"); int(calls) != s.inventories() {
		b.Fatalf("the restarted kollect-agent made %.0f export calls by the time every control was exported, want %d (one per inventory, the control's): the restart exported",
			calls, s.inventories())
	}
	b.Logf("MEASURED: restart: back %.1f s after the new process started (%.1f CPU-s, %.0f lists), RSS %.0f MiB once the controls were exported %s later, PostgreSQL unchanged but for them",
		f.Back, f.CPU, f.Lists, f.RSS, time.Since(controlled).Round(100*time.Millisecond))
	return f
}

// TestRestartComesBack is the benchmark's restart step at a size `make test` affords: 20
// tenants (each namespace with its own scope, database sink and inventory, and a profile and
// target for each of ConfigMaps, Deployments and a CRD's Widgets) × 200 objects. The shipped kollect-agent exports everything, is stopped with SIGTERM and
// started again on the same data and cache directory: it must come back (every target
// complete in every inventory, without exiting) and export nothing but a control object
// created afterwards in every namespace (every other row's xmin, and every state row's
// checksum and exported_at until the controls, unchanged in PostgreSQL, read with psql; one
// export call per inventory).
func TestRestartComesBack(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := shape{objects: 4_000, namespaces: 20, tenants: true, restart: true, kinds: mixed}
	cp, pg, pgURL := startServers(t, ctx, 0)
	if _, err := seed(ctx, cp.Config, s); err != nil {
		t.Fatal(err)
	}
	if err := applyYAML(ctx, cp.Client, s.manifests(pg.Port)); err != nil {
		t.Fatal(err)
	}
	cacheDir := filepath.Join(t.TempDir(), "cache")
	a := startAgent(t, cp.Kubeconfig, cacheDir)
	waitExport(t, ctx, a, pgURL, s, nil)
	t.Logf("first export %.1f s after the start, %.0f lists of %d kinds", time.Since(a.started).Seconds(), s.lists(t, a), len(s.kindList()))
	f := restart(t, ctx, a, cp.Client, cp.Kubeconfig, cacheDir, pgURL, s)
	if f.Lists < float64(len(s.kindList())) {
		t.Fatalf("the restarted agent sent %.0f lists of %d kinds: its targets cannot be complete without a list of each", f.Lists, len(s.kindList()))
	}
}
