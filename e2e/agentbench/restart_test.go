package agentbench

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"
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

// pgSnapshot is what an export would change in PostgreSQL: every row's xmin (any insert or
// update of a row gives it a new one) and every state row's checksum and exported_at (a
// confirmation moves only confirmed_at). Equal snapshots before and after a window are
// server-side evidence that nothing was exported in it.
func pgSnapshot(ctx context.Context, url string) (string, error) {
	return psql(ctx, url, fmt.Sprintf(`SELECT (SELECT count(*) || ':' || coalesce(md5(string_agg(xmin::text, ',' ORDER BY xmin::text)), '')
		FROM kollect.rows WHERE cluster = '%[1]s') || '|' || (SELECT coalesce(md5(string_agg(inventory || '=' || checksum || '@' || exported_at::text,
		',' ORDER BY inventory)), '') FROM kollect.rows_state WHERE cluster = '%[1]s')`, cluster))
}

// restart stops the agent and starts it again with the data unchanged: the new process must
// come back (every target complete in every inventory, no exit) and export nothing (the
// PostgreSQL snapshot unchanged, settle after it came back included).
func restart(b testing.TB, ctx context.Context, a *agentProc, kubeconfig, cacheDir, pgURL string, s shape) restartFigures {
	before, err := pgSnapshot(ctx, pgURL)
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
	time.Sleep(settle)
	if a2.exited() {
		b.Fatalf("the restarted kollect-agent exited after it came back: %v\n%s", a2.waitErr, a2.logTail(40))
	}
	f.RSS = a2.memory(b)["VmRSS"]
	after, err := pgSnapshot(ctx, pgURL)
	if err != nil {
		b.Fatal(err)
	}
	if after != before {
		b.Fatalf("the restart exported: PostgreSQL's rows or state rows changed (%s → %s)", before, after)
	}
	b.Logf("restart: back %.1f s after the new process started (%.1f CPU-s, %.0f lists), RSS %.0f MiB %s later, PostgreSQL unchanged (%s)",
		f.Back, f.CPU, f.Lists, f.RSS, settle, after)
	return f
}

// TestRestartComesBack is the benchmark's restart step at a size `make test` affords: 20
// tenants (each namespace with its own scope, database sink and inventory, and a profile and
// target for each of ConfigMaps, Deployments and a CRD's Widgets) × 200 objects. The shipped kollect-agent exports everything, is stopped with SIGTERM and
// started again on the same data and cache directory: it must come back (every target
// complete in every inventory, without exiting) and export nothing (every row's xmin and
// every state row's checksum and exported_at unchanged in PostgreSQL, read with psql).
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
	f := restart(t, ctx, a, cp.Kubeconfig, cacheDir, pgURL, s)
	if f.Lists < float64(len(s.kindList())) {
		t.Fatalf("the restarted agent sent %.0f lists of %d kinds: its targets cannot be complete without a list of each", f.Lists, len(s.kindList()))
	}
}
