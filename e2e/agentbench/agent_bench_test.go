package agentbench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"kollect.dev/testenv"
)

const (
	cluster    = "bench"
	pgDatabase = "inventory"
	// settle is how long after the first complete export the settled figures are read: long
	// enough for the follow-up status writes and a garbage collection or two.
	settle = 10 * time.Second
	// cpuWindow is the static window after settling over which the idle CPU is measured: no
	// object changes, no resync, no confirmations.
	cpuWindow = 10 * time.Second
	// baselineFile holds the 10k figure `make bench` checks; tolerance is how far above it the
	// benchmark still passes.
	baselineFile = "baseline.json"
	tolerance    = 0.20
)

// size is one sub-benchmark; env, when set, must be set for it to run.
type size struct {
	name string
	shape
	env string
}

var sizes = []size{
	{"objects=0", shape{objects: 0, namespaces: 10}, ""},
	{"objects=10k", shape{objects: 10_000, namespaces: 10}, ""},
	{"mixed=10k", shape{objects: 10_000, namespaces: 10, kinds: mixed}, ""},
	{"objects=100k", shape{objects: 100_000, namespaces: 10}, "KOLLECT_BENCH_LARGE"},
	{"mixed=100k", shape{objects: 100_000, namespaces: 10, kinds: mixed}, "KOLLECT_BENCH_LARGE"},
	{"mixed=1M", shape{objects: 1_000_000, namespaces: 10, kinds: mixed}, "KOLLECT_BENCH_HUGE"},
	{"tenants=100", shape{objects: 100_000, namespaces: 100, tenants: true, restart: true}, "KOLLECT_BENCH_TENANTS"},
}

// BenchmarkAgentProcess runs the shipped kollect-agent against a control plane seeded with N
// objects in 10 namespaces — small labelled ConfigMaps, or (mixed) ConfigMaps, Deployments and
// custom resources, each kind with its profile — one inventory per namespace into PostgreSQL, and
// reports the process's figures from /proc and /metrics: after the first complete export
// (every row in PostgreSQL, counted with SQL, and every inventory's state row written), after
// settling, and its CPU over a static window. One run is one measurement; run it with
// -benchtime 1x.
func BenchmarkAgentProcess(b *testing.B) {
	for _, sz := range sizes {
		b.Run(sz.name, func(b *testing.B) {
			if sz.env != "" && os.Getenv(sz.env) == "" {
				b.Skipf("set %s=1 to run %s", sz.env, sz.name)
			}
			r := measure(b, sz.name, sz.shape)
			r.report(b, sz.name)
			if sz.name == "objects=10k" {
				checkBaseline(b, sz.name, r)
			}
		})
	}
}

// result is one size's figures; memory in MiB, times in seconds.
type result struct {
	Seed, ToExport, CPUToExport, CPUStatic                float64
	RSSExport, RSSSettled, Peak, AnonSettled, FileSettled float64
	HeapExport, HeapSettled, HeapIdleRetained, GoSys      float64
	// PeakRunning is the highest RSS sampled (every 200 ms) after the agent first released
	// its start-up memory: the peak of the work, where Peak (VmHWM) includes start-up.
	PeakRunning float64
	// PeakAnon is the highest RssAnon sampled: allocated memory, what a limit must hold.
	PeakAnon float64
	// Lists are the lists of the seeded kinds the agent sent until the first complete export
	// (kollect_watch_lists_total), StaticLists those during the static window.
	Lists, StaticLists float64
	// With KOLLECT_BENCH_MEMORY_LIMIT: the agent's cgroup's peak charge and working set
	// settled (what the limit holds and `kubectl top pod` shows), and OOM kills in it.
	CgroupPeak, CgroupWorkingSet, OOMKills float64
	// Restart holds the restart step's figures (shape.restart).
	Restart *restartFigures
}

func (r result) report(b *testing.B, name string) {
	b.ReportMetric(r.RSSExport, "RSS-MiB-at-export")
	b.ReportMetric(r.RSSSettled, "RSS-MiB-settled")
	b.ReportMetric(r.Peak, "peak-RSS-MiB")
	b.ReportMetric(r.PeakRunning, "peak-RSS-MiB-after-startup")
	b.ReportMetric(r.PeakAnon, "peak-RssAnon-MiB")
	b.ReportMetric(r.HeapExport, "heap-inuse-MiB-at-export")
	b.ReportMetric(r.HeapSettled, "heap-inuse-MiB-settled")
	b.ReportMetric(r.ToExport, "s-to-first-export")
	b.ReportMetric(r.CPUToExport, "CPU-s-to-first-export")
	b.ReportMetric(r.CPUStatic, "CPU-s-static-10s")
	b.ReportMetric(r.Seed, "s-seeding")
	b.ReportMetric(r.Lists, "lists-to-first-export")
	b.ReportMetric(r.StaticLists, "lists-static")
	if r.CgroupPeak > 0 {
		b.ReportMetric(r.CgroupPeak, "cgroup-peak-MiB")
		b.ReportMetric(r.CgroupWorkingSet, "working-set-MiB-settled")
		b.ReportMetric(r.OOMKills, "oom-kills")
		b.Logf("%s in a memory cgroup limited to %s: peak charge %.0f MiB, working set settled %.0f MiB, %.0f OOM kills",
			name, os.Getenv("KOLLECT_BENCH_MEMORY_LIMIT"), r.CgroupPeak, r.CgroupWorkingSet, r.OOMKills)
	}
	if rs := r.Restart; rs != nil {
		b.ReportMetric(rs.Back, "s-back-after-restart")
		b.ReportMetric(rs.CPU, "CPU-s-back-after-restart")
		b.ReportMetric(rs.Lists, "lists-after-restart")
		b.ReportMetric(rs.RSS, "RSS-MiB-after-restart")
	}
	// Where the settled resident set goes: allocated memory (RssAnon) against the binary's
	// mapped pages (RssFile), and of the Go runtime's memory the freed heap it keeps
	// (idle, not yet returned to the OS) and all it holds from the OS (go_memstats_sys_bytes).
	b.ReportMetric(r.AnonSettled, "RssAnon-MiB-settled")
	b.ReportMetric(r.FileSettled, "RssFile-MiB-settled")
	b.ReportMetric(r.HeapIdleRetained, "heap-idle-retained-MiB-settled")
	b.ReportMetric(r.GoSys, "go-sys-MiB-settled")
	b.Logf("%s: RSS %.0f MiB at the first export, %.0f MiB settled (anon %.0f, file %.0f), peak %.0f MiB (%.0f MiB after start-up, anon %.0f MiB); heap in use %.0f → %.0f MiB, "+
		"idle retained %.0f MiB, Go sys %.0f MiB; first export %.1f s after start (%.1f CPU-s, %.0f lists); %.2f CPU-s and %.0f lists over %s static; seeding %.1f s",
		name, r.RSSExport, r.RSSSettled, r.AnonSettled, r.FileSettled, r.Peak, r.PeakRunning, r.PeakAnon, r.HeapExport, r.HeapSettled,
		r.HeapIdleRetained, r.GoSys, r.ToExport, r.CPUToExport, r.Lists, r.CPUStatic, r.StaticLists, cpuWindow, r.Seed)
}

const mib = 1 << 20

// measure runs one size. KOLLECT_BENCH_PROFILE_DIR, when set, receives the agent's CPU profile
// over 10 s after the static window and its heap profile then (name-static-cpu.pprof,
// name-heap.pprof), for `go tool pprof`.
func measure(b *testing.B, name string, s shape) result {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cp, pg, pgURL := startServers(b, ctx, s.objects)
	var r result
	seedTime, err := seed(ctx, cp.Config, s)
	if err != nil {
		b.Fatal(err)
	}
	r.Seed = seedTime.Seconds()
	b.Logf("seeded %d objects of %d kinds in %d namespaces in %s", s.objects, len(s.kindList()), s.namespaces, seedTime.Round(time.Millisecond))
	if err := applyYAML(ctx, cp.Client, s.manifests(pg.Port)); err != nil {
		b.Fatal(err)
	}

	cacheDir := filepath.Join(b.TempDir(), "cache")
	servers := []string{"kube-apiserver", "etcd", "postgres"}
	serversCPU, err := testenv.CPUByCommand(servers...)
	if err != nil {
		b.Fatal(err)
	}
	writes0, err := kollectWrites(ctx, cp.Config)
	if err != nil {
		b.Fatal(err)
	}
	sessions0, err := pgSessions(ctx, pgURL)
	if err != nil {
		b.Fatal(err)
	}
	a := startAgent(b, cp.Kubeconfig, cacheDir)
	if dir := os.Getenv("KOLLECT_BENCH_PROFILE_DIR"); dir != "" {
		// The initial load's CPU: from as soon as the agent serves pprof, for 40 s.
		go func() {
			file := filepath.Join(dir, strings.ReplaceAll(name, "=", "-")+"-load-cpu.pprof")
			for end := time.Now().Add(time.Minute); time.Now().Before(end) && !a.exited(); time.Sleep(100 * time.Millisecond) {
				if a.saveProfile("profile?seconds=40", file) == nil {
					return
				}
			}
		}()
		go func() {
			// And the API server's over the agent's first 30 s.
			file := filepath.Join(dir, strings.ReplaceAll(name, "=", "-")+"-load-apiserver-cpu.pprof")
			if err := saveAPIServerProfile(ctx, cp.Config, "profile", 30*time.Second, file); err != nil {
				b.Logf("no API server profile: %v", err)
			}
		}()
		if os.Getenv("KOLLECT_BENCH_TRACE") != "" {
			go func() {
				// The API server's execution trace too: what its side of the watch-list waits for.
				file := filepath.Join(dir, strings.ReplaceAll(name, "=", "-")+"-load-apiserver.trace")
				if err := saveAPIServerProfile(ctx, cp.Config, "trace", 30*time.Second, file); err != nil {
					b.Logf("no API server trace: %v", err)
				}
			}()
		}
		if os.Getenv("KOLLECT_BENCH_TRACE") != "" {
			// And an execution trace of its first 30 s, for where the start waits
			// (go tool trace -pprof=sched|sync|net|syscall).
			go func() {
				file := filepath.Join(dir, strings.ReplaceAll(name, "=", "-")+"-load.trace")
				for end := time.Now().Add(time.Minute); time.Now().Before(end) && !a.exited(); time.Sleep(100 * time.Millisecond) {
					if a.saveProfile("trace?seconds=30", file) == nil {
						return
					}
				}
			}()
		}
	}
	waitExport(b, ctx, a, pgURL, s, &r.PeakRunning)
	r.ToExport = time.Since(a.started).Seconds()
	r.CPUToExport = a.cpu(b).Seconds()
	if after, err := testenv.CPUByCommand(servers...); err == nil {
		// What the agent's start cost the servers on the same cores: the wall time to the first
		// export is theirs as much as the agent's.
		var parts []string
		for _, n := range servers {
			parts = append(parts, fmt.Sprintf("%s %.1f", n, (after[n]-serversCPU[n]).Seconds()))
		}
		b.Logf("CPU-s to the first export: kollect-agent %.1f, %s", r.CPUToExport, strings.Join(parts, ", "))
	}
	if writes, err := kollectWrites(ctx, cp.Config); err == nil {
		b.Logf("writes to Kollect objects to the first export (the API server's count): %s", writesSince(writes0, writes))
	}
	if sessions, err := pgSessions(ctx, pgURL); err == nil {
		// PostgreSQL's own count; the benchmark's poll and its two counts take three.
		b.Logf("PostgreSQL sessions to the first export: %d", sessions-sessions0)
	}
	var reconciles []string
	for _, c := range []string{"kollectinventory", "kollecttarget", "kollectscope", "kollectprofile", "kollectdatabasesink"} {
		n, _ := a.metricSum(b, "controller_runtime_reconcile_total", `controller="`+c+`"`)
		reconciles = append(reconciles, fmt.Sprintf("%s %.0f", c, n))
	}
	b.Logf("reconciles to the first export: %s", strings.Join(reconciles, ", "))
	r.Lists = s.lists(b, a)
	atExport := a.memory(b)
	r.RSSExport = atExport["VmRSS"]
	b.Logf("at the first export: RssAnon %.0f MiB, RssFile %.0f MiB", atExport["RssAnon"], atExport["RssFile"])
	r.HeapExport = a.goMemstats(b)["go_memstats_heap_inuse_bytes"] / mib

	// Settled: the agent has released its start-up memory a second time (by default 30 s
	// after its caches synced), then settle more.
	for release := time.Now().Add(2 * time.Minute); !a.releasedSettled(); time.Sleep(200 * time.Millisecond) {
		r.PeakRunning = max(r.PeakRunning, a.memory(b)["VmRSS"])
		if time.Now().After(release) {
			b.Fatal(`kollect-agent has not logged "released start-up memory" when the load settled within 2 minutes of the export`)
		}
	}
	time.Sleep(settle)
	m, g := a.memory(b), a.goMemstats(b)
	r.RSSSettled, r.AnonSettled, r.FileSettled = m["VmRSS"], m["RssAnon"], m["RssFile"]
	r.HeapSettled = g["go_memstats_heap_inuse_bytes"] / mib
	r.HeapIdleRetained = (g["go_memstats_heap_idle_bytes"] - g["go_memstats_heap_released_bytes"]) / mib
	r.GoSys = g["go_memstats_sys_bytes"] / mib

	cpu0 := a.cpu(b)
	lists0 := s.lists(b, a)
	for end := time.Now().Add(cpuWindow); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		r.PeakRunning = max(r.PeakRunning, a.memory(b)["VmRSS"])
	}
	r.CPUStatic = (a.cpu(b) - cpu0).Seconds()
	lists1 := s.lists(b, a)
	r.StaticLists = lists1 - lists0
	r.Peak = a.memory(b)["VmHWM"]
	if a.cg != nil {
		var kills int64
		if r.CgroupPeak, r.CgroupWorkingSet, kills, err = a.cg.figures(); err != nil {
			b.Fatalf("reading the agent's memory cgroup: %v", err)
		}
		r.OOMKills = float64(kills)
	}
	r.PeakAnon = float64(a.peakAnon.Load()) / 1024
	if a.exited() {
		b.Fatalf("kollect-agent exited during the static window: %v", a.waitErr)
	}
	if rows, _, err := exported(psqlQuery(ctx, pgURL)); err != nil || rows != s.objects {
		b.Fatalf("after the static window PostgreSQL holds %d rows, want %d (%v)", rows, s.objects, err)
	}
	if dir := os.Getenv("KOLLECT_BENCH_PROFILE_DIR"); dir != "" {
		file := func(kind string) string {
			return filepath.Join(dir, strings.ReplaceAll(name, "=", "-")+"-"+kind+".pprof")
		}
		a.profile(b, "profile?seconds=10", file("static-cpu"))
		a.profile(b, "heap", file("heap"))
	}
	if s.restart {
		rs := restart(b, ctx, a, cp.Client, cp.Kubeconfig, cacheDir, pgURL, s)
		r.Restart = &rs
	}
	return r
}

// startServers starts the control plane, sized for objects, and PostgreSQL together, and
// creates the database.
func startServers(b testing.TB, ctx context.Context, objects int) (*testenv.ControlPlane, *testenv.Postgres, string) {
	b.Helper()
	// The control plane and PostgreSQL start together.
	var (
		cp           *testenv.ControlPlane
		pg           *testenv.Postgres
		cpErr, pgErr error
		wg           sync.WaitGroup
	)
	var opts testenv.Options
	if objects > 500_000 {
		opts.EtcdQuotaBytes = 8 << 30 // a million mixed objects pass etcd's default 2 GiB
	}
	wg.Go(func() { cp, cpErr = testenv.Start("agentbench", opts) })
	wg.Go(func() { pg, pgErr = testenv.StartPostgres() })
	wg.Wait()
	if cp != nil {
		b.Cleanup(func() { _ = cp.Stop() })
	}
	if pg != nil {
		b.Cleanup(pg.Stop)
	}
	if err := errors.Join(cpErr, pgErr); err != nil {
		b.Fatal(err)
	}
	pgURL, err := pg.CreateDatabase(ctx, pgDatabase)
	if err != nil {
		b.Fatal(err)
	}
	return cp, pg, pgURL
}

// waitExport waits for the agent's first complete export: every row in PostgreSQL and every
// inventory's state row.
// peak, when not nil, is raised to the RSS sampled once the agent has released its start-up
// memory.
func waitExport(b testing.TB, ctx context.Context, a *agentProc, pgURL string, s shape, peak *float64) {
	b.Helper()
	// Generous: the issue measured 258 s for 100 tenants; 1M objects at the old benchmark's
	// rate would take about 7 minutes.
	deadline := a.started.Add(5*time.Minute + time.Duration(s.objects)*time.Millisecond)
	// The timeline of the first export: when the first rows and state rows showed up and how
	// the rest followed (where the time to the first complete export goes).
	var timeline []string
	lastStates, lastRows := -1, -1
	poll, err := newPollSession(ctx, pgURL)
	if err != nil {
		b.Fatal(err)
	}
	defer poll.close()
	for {
		if a.exited() {
			b.Fatalf("kollect-agent exited before the first complete export: %v", a.waitErr)
		}
		rows, states, err := exported(poll.query)
		if err != nil {
			b.Fatal(err)
		}
		if peak != nil && a.released() > 0 {
			*peak = max(*peak, a.memory(b)["VmRSS"])
		}
		if states != lastStates || (lastRows == 0 && rows > 0) {
			timeline = append(timeline, fmt.Sprintf("%.1fs %d rows %d states", time.Since(a.started).Seconds(), rows, states))
			lastStates, lastRows = states, rows
		}
		if rows == s.objects && states == s.inventories() {
			if len(timeline) > 24 { // the first and last dozen changes
				timeline = append(append(timeline[:12:12], "…"), timeline[len(timeline)-12:]...)
			}
			b.Logf("first export timeline: %s", strings.Join(timeline, ", "))
			return
		}
		if rows > s.objects {
			b.Fatalf("PostgreSQL holds %d rows of cluster %s, want %d", rows, cluster, s.objects)
		}
		if time.Now().After(deadline) {
			b.Fatalf("no complete export %s after the agent's start: %d of %d rows, %d of %d state rows",
				time.Since(a.started).Round(time.Second), rows, s.objects, states, s.inventories())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// baseline is baseline.json: the figures `make bench` holds the benchmark to, by size.
type baseline map[string]struct {
	// RSSSettledMiB is the settled resident set measured when the baseline was recorded.
	RSSSettledMiB float64 `json:"rssSettledMiB"`
	Measured      string  `json:"measured"`
}

// checkBaseline fails the benchmark when the settled RSS exceeds the checked-in figure by more
// than tolerance: a memory regression fails `make bench`. KOLLECT_BENCH_RECORD=1 records the
// figure just measured instead (commit the file with the change that moved it, and say why).
func checkBaseline(b *testing.B, name string, r result) {
	base := baseline{}
	raw, err := os.ReadFile(baselineFile)
	if err != nil {
		b.Fatalf("reading %s: %v", baselineFile, err)
	}
	if err := json.Unmarshal(raw, &base); err != nil {
		b.Fatalf("parsing %s: %v", baselineFile, err)
	}
	if os.Getenv("KOLLECT_BENCH_RECORD") != "" {
		e := base[name]
		e.RSSSettledMiB, e.Measured = float64(int(r.RSSSettled+0.5)), time.Now().UTC().Format("2006-01-02")
		base[name] = e
		out, err := json.MarshalIndent(base, "", "  ")
		if err != nil {
			b.Fatalf("encoding %s: %v", baselineFile, err)
		}
		if err := os.WriteFile(baselineFile, append(out, '\n'), 0o644); err != nil {
			b.Fatalf("writing %s: %v", baselineFile, err)
		}
		b.Logf("recorded %s: %s settled RSS %.0f MiB", baselineFile, name, r.RSSSettled)
		return
	}
	e, ok := base[name]
	if !ok || e.RSSSettledMiB <= 0 {
		b.Fatalf("%s has no figure for %s: record one with KOLLECT_BENCH_RECORD=1", baselineFile, name)
	}
	if limit := e.RSSSettledMiB * (1 + tolerance); r.RSSSettled > limit {
		b.Fatalf("%s: settled RSS %.0f MiB exceeds the baseline's %.0f MiB (%s) by more than %.0f%% (limit %.0f MiB)",
			name, r.RSSSettled, e.RSSSettledMiB, e.Measured, tolerance*100, limit)
	}
	b.Logf("%s: settled RSS %.0f MiB within %.0f%% of the baseline's %.0f MiB", name, r.RSSSettled, tolerance*100, e.RSSSettledMiB)
}
