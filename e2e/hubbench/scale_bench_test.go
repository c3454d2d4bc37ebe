package hubbench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"kollect.dev/e2e/dashboard/fleetsim"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"
	"kollect.dev/testenv"
)

// manifests is the bundle each rollout releases; the iteration number goes into the match
// expression so that every revision differs.
const manifests = `apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: deployments, namespace: kollect-system}
spec:
  target: {group: apps, version: v1, kind: Deployment}
  attributes:
    - {name: replicas, jsonPath: "{.spec.replicas}", type: int}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectTarget
metadata: {name: deployments, namespace: kollect-system}
spec:
  profileRef: {name: deployments}
  match: "object.spec.replicas > %d"
`

// heartbeat is how often every simulated agent reports; the steady window is one interval, so
// that every agent heartbeats in it once.
const heartbeat = time.Minute

// agents is how many simulated agents join; KOLLECT_BENCH_AGENTS overrides the 1,000 default
// (the goal is 10,000).
func agents(b *testing.B) int {
	if v := os.Getenv("KOLLECT_BENCH_AGENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("KOLLECT_BENCH_AGENTS=%q", v)
		}
		return n
	}
	return 1000
}

// raiseOpenFiles lifts this process's open-file limit to its hard limit: every simulated
// agent holds a connection of its own, and the hubs (children) inherit the limit.
func raiseOpenFiles(b *testing.B, need int) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
	if lim.Cur < uint64(need) {
		b.Fatalf("open-file limit %d is below the %d this benchmark needs: raise the hard limit (ulimit -Hn)", lim.Cur, need)
	}
}

// BenchmarkHubScale joins N simulated agents (e2e/dashboard/fleetsim, each with its own TLS
// connection, WatchConfig stream and a heartbeat a minute) to kollect-hub processes and
// measures the hubs alone, from their /proc entries:
//
//   - steady: one heartbeat interval after every agent joined; hub-cores is the hubs' CPU
//     seconds per second of it. It still holds each agent's first heartbeat since the joins
//     moved the cluster epoch, which reads its credential from the store again.
//   - settled: the next heartbeat interval, measured the same way: nothing joined since the
//     window before, so credentials come from the replicas' caches.
//   - rollout: one operation is a staged rollout (10 waves of 10%, only the "applied" gate,
//     min_healthy 0) to every agent, from ApplyBundle with hold to COMPLETED.
//
// Topologies: sqlite (one hub, the default store) and postgres-2-replicas (two hubs on one
// PostgreSQL database, half the agents on each; figures are summed, and each replica's are
// reported as hub0-… and hub1-…), without a memory limit (memLimit). KOLLECT_BENCH_PROFILE=DIR saves each hub's CPU profile of
// the steady window and of the first rollout, and its heap at the end, into DIR.
func BenchmarkHubScale(b *testing.B) {
	n := agents(b)
	raiseOpenFiles(b, n+1000)
	bin := hubBinary(b)
	b.Run("sqlite", func(b *testing.B) {
		f := join(b, bin, n, 1, "")
		b.Run("steady", f.window("steady"))
		b.Run("settled", f.window("settled"))
		b.Run("rollout", f.rollout)
	})
	b.Run("postgres-2-replicas", func(b *testing.B) {
		var opts testenv.PostgresOptions
		profileDir := os.Getenv("KOLLECT_BENCH_PROFILE")
		if profileDir != "" {
			// The server's side of the profile: what each statement cost it, planning included.
			opts.Settings = []string{"shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track_planning=on"}
		}
		pg, err := testenv.StartPostgresWith(opts)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(pg.Stop)
		dsn, err := pg.CreateDatabase(context.Background(), "hubbench")
		if err != nil {
			b.Fatal(err)
		}
		if profileDir != "" {
			if out, err := exec.Command("psql", dsn, "-qc", "CREATE EXTENSION pg_stat_statements").CombinedOutput(); err != nil {
				b.Fatalf("pg_stat_statements: %v: %s", err, out)
			}
		}
		f := join(b, bin, n, 2, dsn)
		if profileDir != "" {
			f.statements = dsn
		}
		b.Run("steady", f.window("steady"))
		b.Run("settled", f.window("settled"))
		b.Run("rollout", f.rollout)
	})
}

// memLimit is the GOMEMLIMIT every hub runs with: none unless KOLLECT_BENCH_GOMEMLIMIT sets
// one ("off" is none too). The hub collects at GOGC 25 by default, which holds 10,000 agents
// under 1 GiB without a limit; a limit close to a replica's live memory (about 400 MiB per
// 5,000 agents) makes the collector run without pause: two replicas at 460 MiB each used 1.5
// cores at steady state (docs/performance.md).
func memLimit() string {
	if v := os.Getenv("KOLLECT_BENCH_GOMEMLIMIT"); v != "off" {
		return v
	}
	return ""
}

// scale is a joined fleet and its hubs.
type scale struct {
	name       string
	n          int
	hubs       []*hub
	admin      fleetv1connect.FleetServiceClient
	profileDir string
	// statements, when set, is the PostgreSQL store whose pg_stat_statements the rollouts
	// reset when they start and save when they end.
	statements string
	rollouts   int // rollouts run so far; revision 1 is released before the first
}

// join starts replicas hubs on store ("" for SQLite) and joins n agents, spread evenly.
func join(b *testing.B, bin string, n, replicas int, store string) *scale {
	ctx := context.Background()
	dataDir := b.TempDir()
	s := &scale{name: strings.ReplaceAll(b.Name(), "/", "-"), n: n, profileDir: os.Getenv("KOLLECT_BENCH_PROFILE")}
	for range replicas {
		s.hubs = append(s.hubs, startHub(b, bin, dataDir, store, memLimit()))
	}
	s.admin = s.hubs[0].fleetClient()
	boot, err := s.admin.CreateBootstrapToken(ctx, connect.NewRequest(&fleetv1.CreateBootstrapTokenRequest{
		Description: "hubbench", MaxUses: int64(n)}))
	if err != nil {
		b.Fatal(err)
	}
	var fleets []*fleetsim.Fleet
	for _, h := range s.hubs {
		f, err := fleetsim.New(h.url, h.caPEM, boot.Msg.GetSecret(), heartbeat)
		if err != nil {
			b.Fatal(err)
		}
		f.ConnectionPerAgent()
		b.Cleanup(f.Close)
		fleets = append(fleets, f)
	}
	start := time.Now()
	var (
		wg   sync.WaitGroup
		errs = make(chan error, n)
		sem  = make(chan struct{}, 32)
	)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c := fleetsim.Healthy(fmt.Sprintf("c%05d", i), map[string]string{"env": "bench"}, int64(100+i%900))
			if err := fleets[i%len(fleets)].Add(ctx, c); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	for i, h := range s.hubs {
		waitConnected(b, h, (n+replicas-1-i)/replicas)
	}
	for i, h := range s.hubs {
		rss, peak := h.memory(b)
		b.Logf("%d simulated agents joined in %s; hub %d RSS %.0f MiB (peak %.0f MiB)", n, time.Since(start).Round(time.Second), i, rss, peak)
	}
	return s
}

// waitConnected waits until want agents hold a WatchConfig stream on h (its
// kollect_hub_connected_agents metric).
func waitConnected(b *testing.B, h *hub, want int) {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		m, err := h.metrics()
		got := int(m["kollect_hub_connected_agents"])
		if err == nil && got >= want {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d agents connected to %s after 5 minutes (%v)", got, want, h.url, err)
		}
		time.Sleep(time.Second)
	}
}

// metrics reads the hub's unlabelled series from /metrics (one scrape, as Prometheus would).
func (h *hub) metrics() (map[string]float64, error) {
	req, err := http.NewRequest(http.MethodGet, h.url+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+h.adminToken)
	resp, err := h.fleetClientHTTP().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			out[name] = v
		}
	}
	return out, sc.Err()
}

// logMemory logs where a hub's memory is, from the Go runtime's own figures.
func (h *hub) logMemory(b *testing.B, i int) {
	m, err := h.metrics()
	if err != nil {
		b.Logf("hub %d metrics: %v", i, err)
		return
	}
	const mib = 1 << 20
	b.Logf("hub %d: %.0f goroutines; heap in use %.0f MiB, stacks %.0f MiB, next GC at %.0f MiB, from the OS %.0f MiB",
		i, m["go_goroutines"], m["go_memstats_heap_inuse_bytes"]/mib, m["go_memstats_stack_inuse_bytes"]/mib,
		m["go_memstats_next_gc_bytes"]/mib, m["go_memstats_sys_bytes"]/mib)
}

// window returns a benchmark of the hubs over one heartbeat interval, named what in the
// profiles.
func (s *scale) window(what string) func(*testing.B) {
	return func(b *testing.B) { s.steady(b, what) }
}

// steady measures the hubs over one heartbeat interval.
func (s *scale) steady(b *testing.B, what string) {
	cpu0 := make([]time.Duration, len(s.hubs))
	reads0 := make([]float64, len(s.hubs))
	refreshes0 := make([]float64, len(s.hubs))
	var total time.Duration
	for i, h := range s.hubs {
		// Before the window: a scrape costs the hub a fleet snapshot.
		if m, err := h.metrics(); err == nil {
			reads0[i] = m["kollect_hub_credential_store_reads_total"]
			refreshes0[i] = m["kollect_hub_credential_refreshes_total"]
		}
	}
	profiles := s.startProfiles(b, what, heartbeat)
	for i, h := range s.hubs {
		cpu0[i] = h.cpu(b)
	}
	for b.Loop() {
		time.Sleep(heartbeat)
		total += heartbeat
	}
	used := make([]float64, len(s.hubs))
	for i, h := range s.hubs {
		used[i] = (h.cpu(b) - cpu0[i]).Seconds() / total.Seconds()
	}
	for i, h := range s.hubs {
		if m, err := h.metrics(); err == nil {
			b.Logf("hub %d: %.0f credentials read from the store in the window, and every cluster's %.0f times",
				i, m["kollect_hub_credential_store_reads_total"]-reads0[i], m["kollect_hub_credential_refreshes_total"]-refreshes0[i])
		}
	}
	profiles()
	var cores, rss, peak float64
	for i, h := range s.hubs {
		c := used[i]
		r, p := h.memory(b)
		h.logMemory(b, i) // after reading the CPU and RSS: a scrape costs the hub a fleet snapshot
		cores, rss, peak = cores+c, rss+r, peak+p
		if len(s.hubs) > 1 {
			b.ReportMetric(c, fmt.Sprintf("hub%d-cores", i))
			b.ReportMetric(r, fmt.Sprintf("hub%d-RSS-MiB", i))
		}
	}
	b.ReportMetric(cores, "hub-cores")
	b.ReportMetric(rss, "hub-RSS-MiB")
	b.ReportMetric(peak, "hub-peak-RSS-MiB")
	b.ReportMetric(float64(s.n), "agents")
}

// rollout measures staged rollouts to every agent.
func (s *scale) rollout(b *testing.B) {
	ctx := context.Background()
	strategy := &fleetv1.RolloutStrategy{
		WaveSize: &fleetv1.WaveSize{Size: &fleetv1.WaveSize_Percent{Percent: 10}},
		Gates:    &fleetv1.RolloutGates{SkipInventoriesReady: true, SkipSinkErrors: true, SkipCoverage: true},
	}
	selector := &fleetv1.LabelSelector{MatchLabels: map[string]string{"env": "bench"}}
	if s.rollouts == 0 {
		// Release revision 1 at once so that every rollout is a move between revisions.
		if _, err := s.admin.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{
			Name: "bench", Manifests: fmt.Sprintf(manifests, 0), ClusterSelector: selector})); err != nil {
			b.Fatal(err)
		}
		// The timed rollouts start from a settled fleet: every agent applied revision 1 and
		// said so. Timed while 10,000 agents still apply the release and report it, the first
		// rollout measured that release too (its StartRollout took 36 s amid the fleet's
		// heartbeats on PostgreSQL).
		time.Sleep(3 * time.Second) // into the burst of the fleet's heartbeats
		s.timeAdminReads(b, "3 s into the fleet's reports of the release")
		s.waitInSync(b)
		s.timeAdminReads(b, "once the fleet is in sync")
	}
	cpu0 := make([]time.Duration, len(s.hubs))
	for i, h := range s.hubs {
		cpu0[i] = h.cpu(b)
	}
	var worst time.Duration
	var profiles func()
	if s.statements != "" {
		if out, err := exec.Command("psql", s.statements, "-qc", "SELECT pg_stat_statements_reset()").CombinedOutput(); err != nil {
			b.Fatalf("pg_stat_statements_reset: %v: %s", err, out)
		}
	}
	for b.Loop() {
		s.rollouts++
		if profiles == nil {
			profiles = s.startProfiles(b, "rollout", 30*time.Second)
		}
		t0 := time.Now()
		if _, err := s.admin.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{
			Name: "bench", Manifests: fmt.Sprintf(manifests, s.rollouts), ClusterSelector: selector, Hold: true})); err != nil {
			b.Fatal(err)
		}
		started, err := s.admin.StartRollout(ctx, connect.NewRequest(&fleetv1.StartRolloutRequest{Bundle: "bench", Strategy: strategy}))
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		pg0, _ := testenv.CPUByCommand("postgres")
		self0, _ := testenv.ProcessCPU(os.Getpid())
		s.waitCompleted(b, started.Msg.GetRollout().GetId())
		worst = max(worst, time.Since(t0))
		// Where the machine's CPU went during the waves: the hubs' is reported below; the
		// simulated fleet is this process.
		pg1, _ := testenv.CPUByCommand("postgres")
		self1, _ := testenv.ProcessCPU(os.Getpid())
		b.Logf("rollout %d: ApplyBundle and StartRollout %s, the waves %s (CPU-s over the waves: postgres %.1f, simulated fleet %.1f)",
			s.rollouts, t1.Sub(t0).Round(time.Millisecond), time.Since(t1).Round(time.Millisecond),
			(pg1["postgres"] - pg0["postgres"]).Seconds(), (self1 - self0).Seconds())
	}
	var cpu, rss float64
	for i, h := range s.hubs {
		c := (h.cpu(b) - cpu0[i]).Seconds() / float64(b.N)
		r, _ := h.memory(b)
		cpu, rss = cpu+c, rss+r
		if len(s.hubs) > 1 {
			b.ReportMetric(c, fmt.Sprintf("hub%d-CPU-s/op", i))
			b.ReportMetric(r, fmt.Sprintf("hub%d-RSS-MiB", i))
		}
	}
	profiles()
	if s.statements != "" {
		saveStatements(b, s.statements, filepath.Join(s.profileDir, s.name+"-rollout-postgres-statements.txt"))
	}
	b.ReportMetric(cpu, "hub-CPU-s/op")
	b.ReportMetric(float64(worst.Milliseconds()), "worst-ms")
	b.ReportMetric(float64(s.n), "agents")
	b.ReportMetric(rss, "hub-RSS-MiB")
}

// timeAdminReads logs how long five ListRollouts calls in a row take, each one query of the
// store: what a user's call or the rollout engine's pass waits for a connection while the
// fleet's heartbeats hold the store.
func (s *scale) timeAdminReads(b *testing.B, when string) {
	t0 := time.Now()
	for range 5 {
		if _, err := s.admin.ListRollouts(context.Background(), connect.NewRequest(&fleetv1.ListRolloutsRequest{Bundle: "bench", Limit: 1})); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("five ListRollouts %s: %s", when, time.Since(t0).Round(time.Millisecond))
}

// waitInSync waits until no cluster's applied configuration differs from its desired one.
func (s *scale) waitInSync(b *testing.B) {
	t0 := time.Now()
	for deadline := t0.Add(10 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		h, err := s.admin.GetFleetHealth(context.Background(), connect.NewRequest(&fleetv1.GetFleetHealthRequest{}))
		if err != nil {
			b.Fatal(err)
		}
		if h.Msg.GetClustersConfigSkew() == 0 && h.Msg.GetClustersOnline() == int64(s.n) {
			b.Logf("the fleet applied the release %s after it", time.Since(t0).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d clusters still apply another configuration than their desired one after 10 minutes",
				h.Msg.GetClustersConfigSkew(), s.n)
		}
	}
}

// waitCompleted waits for a rollout to complete with every agent healthy. It polls
// ListRollouts, which answers from the rollout's row (waves with their counts), as the
// dashboard's rollout list does: GetRollout would add a read of every cluster's row to the
// hub's work 20 times a second.
func (s *scale) waitCompleted(b *testing.B, id int64) {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		got, err := s.admin.ListRollouts(context.Background(), connect.NewRequest(&fleetv1.ListRolloutsRequest{Bundle: "bench", Limit: 1}))
		if err != nil {
			b.Fatal(err)
		}
		if len(got.Msg.GetRollouts()) != 1 || got.Msg.GetRollouts()[0].GetId() != id {
			b.Fatalf("rollout %d is not the bundle's latest: %v", id, got.Msg.GetRollouts())
		}
		r := got.Msg.GetRollouts()[0]
		switch r.GetPhase() {
		case fleetv1.RolloutPhase_ROLLOUT_PHASE_COMPLETED:
			var healthy int64
			for _, w := range r.GetWaves() {
				healthy += w.GetClustersHealthy()
			}
			if len(r.GetWaves()) != 10 || healthy != int64(s.n) {
				b.Fatalf("rollout %d completed in %d waves with %d of %d clusters healthy", id, len(r.GetWaves()), healthy, s.n)
			}
			return
		case fleetv1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING:
		default:
			b.Fatalf("rollout %d is %v: %s", id, r.GetPhase(), r.GetMessage())
		}
		if time.Now().After(deadline) {
			b.Fatalf("rollout %d not completed in 10 minutes (wave %d)", id, r.GetCurrentWave())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startProfiles starts a CPU profile of every hub over d when KOLLECT_BENCH_PROFILE is set; the
// function it returns waits for them and saves each hub's heap profile too.
func (s *scale) startProfiles(b *testing.B, what string, d time.Duration) func() {
	if s.profileDir == "" {
		return func() {}
	}
	var wg sync.WaitGroup
	for i, h := range s.hubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("%s-%d-hub%d-%s", s.name, s.n, i, what)
			if err := h.profile(context.Background(), s.profileDir, name+".cpu.pprof",
				fmt.Sprintf("profile?seconds=%d", int(d.Seconds()))); err != nil {
				b.Error(err)
			}
		}()
	}
	return func() {
		wg.Wait()
		for i, h := range s.hubs {
			name := fmt.Sprintf("%s-%d-hub%d-%s.heap.pprof", s.name, s.n, i, what)
			if err := h.profile(context.Background(), s.profileDir, name, "heap"); err != nil {
				b.Error(err)
			}
		}
	}
}

// saveStatements writes PostgreSQL's statements by total execution time (pg_stat_statements)
// into file: calls, total and mean milliseconds of execution, plannings and their total
// milliseconds, rows, and the statement.
func saveStatements(b *testing.B, dsn, file string) {
	out, err := exec.Command("psql", dsn, "-qc", `SELECT calls, round(total_exec_time) AS total_ms,
		round(mean_exec_time::numeric, 3) AS mean_ms, plans, round(total_plan_time) AS plan_ms, rows,
		left(regexp_replace(query, '\s+', ' ', 'g'), 160) AS query
		FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 40`).CombinedOutput()
	if err != nil {
		b.Logf("reading pg_stat_statements: %v: %s", err, out)
		return
	}
	if err := os.WriteFile(file, out, 0o644); err != nil {
		b.Log(err)
	}
}
