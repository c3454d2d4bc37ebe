package agentbench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"kollect.dev/testenv"
)

// The agent binary is built on the first test or benchmark that needs it, not in a TestMain:
// `go test -run X` of another test must not pay for a build.
var (
	buildOnce sync.Once
	agentBin  string
	buildErr  error
	binDir    string
)

func agentBinary(b testing.TB) string {
	b.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "kollect-agentbench-bin-"); buildErr != nil {
			return
		}
		var built []string
		if built, buildErr = testenv.BuildCommands(binDir, "", "./agent/cmd/kollect-agent"); buildErr == nil {
			agentBin = built[0]
		}
	})
	if buildErr != nil {
		b.Fatalf("building kollect-agent: %v", buildErr)
	}
	return agentBin
}

func TestMain(m *testing.M) {
	// envtest logs through controller-runtime's logger; unset, it prints a stack trace into
	// the benchmark's output.
	ctrllog.SetLogger(logr.Discard())
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// agentProc is a kollect-agent process.
type agentProc struct {
	cmd                     *exec.Cmd
	metrics, healthz, pprof string
	log                     string
	started                 time.Time
	// done is closed when the process has exited; waitErr is then its exit status.
	done    chan struct{}
	waitErr error
	// peakAnon is the highest RssAnon sampled every 100 ms while the process ran: the part of
	// the peak a memory limit can OOM-kill for. The rest of VmHWM is clean pages of the
	// executable, which the kernel reclaims under a limit instead.
	peakAnon atomic.Uint64 // KiB
	// cg, with KOLLECT_BENCH_MEMORY_LIMIT, is the memory cgroup the agent runs in.
	cg *memoryCgroup
}

// startAgent starts the shipped agent as a user would run it standalone (no hub, no webhooks,
// no GOMEMLIMIT), with local sinks allowed because PostgreSQL listens on 127.0.0.1, and its
// pprof endpoint on a free port (it costs nothing until asked). cacheDir is its --cache-dir:
// a restart passes the first process's, as the chart's emptyDir outlives a container restart.
// It returns once the process is started, not when it is ready, so that the time to the
// first export counts from the process's start.
func startAgent(b testing.TB, kubeconfig, cacheDir string) *agentProc {
	b.Helper()
	bin := agentBinary(b)
	var ports [3]int
	for i := range ports {
		p, err := testenv.FreePort()
		if err != nil {
			b.Fatal(err)
		}
		ports[i] = p
	}
	dir := b.TempDir()
	a := &agentProc{metrics: fmt.Sprintf("127.0.0.1:%d", ports[0]), healthz: fmt.Sprintf("127.0.0.1:%d", ports[1]),
		pprof: fmt.Sprintf("127.0.0.1:%d", ports[2]), log: filepath.Join(dir, "agent.log")}
	logFile, err := os.Create(a.log)
	if err != nil {
		b.Fatalf("creating the agent's log: %v", err)
	}
	argv := []string{bin, "--cluster-name", cluster, "--metrics-bind-address", a.metrics,
		"--health-probe-bind-address", a.healthz, "--pprof-bind-address", a.pprof, "--cache-dir", cacheDir, "--allow-local-sinks"}
	// KOLLECT_BENCH_MEMORY_LIMIT (a quantity, e.g. 64Mi) runs the agent in a memory cgroup with
	// that limit, as a container with resources.limits.memory runs, its binary evicted from the
	// page cache first so that its pages are charged to it as on a container's first start.
	if limit := os.Getenv("KOLLECT_BENCH_MEMORY_LIMIT"); limit != "" {
		cg, err := newMemoryCgroup(fmt.Sprintf("kollect-bench-%d-%d", os.Getpid(), ports[0]), limit)
		if err != nil {
			b.Fatal(err)
		}
		if err := evictFromPageCache(bin); err != nil {
			b.Fatalf("evicting %s from the page cache: %v", bin, err)
		}
		a.cg, argv = cg, cg.wrap(argv)
	}
	a.cmd = exec.Command(argv[0], argv[1:]...)
	// GOMEMLIMIT and GOGC from the benchmark's environment would change what is measured.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOMEMLIMIT=") && !strings.HasPrefix(kv, "GOGC=") && !strings.HasPrefix(kv, "KUBECONFIG=") {
			a.cmd.Env = append(a.cmd.Env, kv)
		}
	}
	a.cmd.Env = append(a.cmd.Env, "KUBECONFIG="+kubeconfig)
	// KOLLECT_BENCH_AGENT_ENV (space-separated KEY=VALUE) measures the agent as a deployment
	// configures it, e.g. GOMEMLIMIT as the chart sets it from the container's limit.
	a.cmd.Env = append(a.cmd.Env, strings.Fields(os.Getenv("KOLLECT_BENCH_AGENT_ENV"))...)
	a.cmd.Stdout, a.cmd.Stderr = logFile, logFile
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	a.started = time.Now()
	if err := a.cmd.Start(); err != nil {
		logFile.Close()
		b.Fatalf("starting kollect-agent: %v", err)
	}
	logFile.Close()
	a.done = make(chan struct{})
	go func() { a.waitErr = a.cmd.Wait(); close(a.done) }()
	go a.sampleAnon()
	b.Cleanup(func() {
		a.stop()
		if a.cg != nil {
			a.cg.remove()
		}
		if b.Failed() {
			b.Logf("agent log (tail):\n%s", a.logTail(40))
		}
		if dir := os.Getenv("KOLLECT_BENCH_PROFILE_DIR"); dir != "" {
			if raw, err := os.ReadFile(a.log); err == nil {
				_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("agent-%d.log", a.pid())), raw, 0o644)
			}
		}
	})
	return a
}

func (a *agentProc) pid() int { return a.cmd.Process.Pid }

// stop sends SIGTERM, as the kubelet does, and waits up to 30 s before killing the process;
// it returns the exit status.
func (a *agentProc) stop() error {
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.done
	}
	return a.waitErr
}

// logTail is the last n lines of the agent's log.
func (a *agentProc) logTail(n int) string {
	raw, _ := os.ReadFile(a.log)
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// metricSum adds up the agent's samples of one metric whose labels contain every one of
// want (`kind="ConfigMap"`), from its /metrics; the count of such samples comes too.
func (a *agentProc) metricSum(b testing.TB, name string, want ...string) (sum float64, samples int) {
	b.Helper()
	sum, samples, err := a.tryMetricSum(name, want...)
	if err != nil {
		b.Fatal(err)
	}
	return sum, samples
}

// tryMetricSum is metricSum for a process that may not serve /metrics yet.
func (a *agentProc) tryMetricSum(name string, want ...string) (sum float64, samples int, err error) {
	resp, err := http.Get("http://" + a.metrics + "/metrics")
	if err != nil {
		return 0, 0, fmt.Errorf("scraping the agent's metrics: %w", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
scan:
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		for _, w := range want {
			if !strings.Contains(rest, w) {
				continue scan
			}
		}
		i := strings.LastIndexByte(rest, ' ')
		v, err := strconv.ParseFloat(rest[i+1:], 64)
		if err != nil {
			continue
		}
		sum += v
		samples++
	}
	if err := sc.Err(); err != nil {
		return 0, 0, fmt.Errorf("reading the agent's metrics: %w", err)
	}
	return sum, samples, nil
}

// profile saves one of the agent's pprof profiles (path: "profile?seconds=10", "heap") to
// file, for `go tool pprof`.
func (a *agentProc) profile(b testing.TB, path, file string) {
	b.Helper()
	if err := a.saveProfile(path, file); err != nil {
		b.Fatal(err)
	}
	b.Logf("saved the agent's %s profile in %s", path, file)
}

// saveProfile is profile without a testing.TB, for the sampling goroutine.
func (a *agentProc) saveProfile(path, file string) error {
	resp, err := http.Get("http://" + a.pprof + "/debug/pprof/" + path)
	if err != nil {
		return fmt.Errorf("reading the agent's %s profile: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("reading the agent's %s profile: %s", path, resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := io.Copy(f, resp.Body); err != nil {
		return fmt.Errorf("saving the agent's %s profile: %w", path, err)
	}
	return nil
}

// exited reports whether the agent process has gone (a crash would otherwise show as a slow
// export).
func (a *agentProc) exited() bool {
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

// memory is the agent's /proc status figures in MiB.
func (a *agentProc) memory(b testing.TB) map[string]float64 {
	b.Helper()
	m, err := testenv.ProcessMemory(a.pid())
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// sampleAnon raises peakAnon until the process exits. With KOLLECT_BENCH_PROFILE_DIR it also
// saves the agent's heap profile (as of its last collection) whenever the peak has grown by
// 4 MiB since the last one saved, at most once a second: the profile nearest the peak is
// what is left in peak-heap.pprof.
func (a *agentProc) sampleAnon() {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	dir := os.Getenv("KOLLECT_BENCH_PROFILE_DIR")
	var profiled uint64
	var profiledAt time.Time
	for {
		select {
		case <-a.done:
			return
		case <-t.C:
			if m, err := testenv.ProcessMemory(a.pid()); err == nil {
				kib := uint64(m["RssAnon"] * 1024)
				for old := a.peakAnon.Load(); kib > old && !a.peakAnon.CompareAndSwap(old, kib); old = a.peakAnon.Load() {
				}
				if dir != "" && kib > profiled+4<<10 && time.Since(profiledAt) > time.Second {
					if err := a.saveProfile("heap", filepath.Join(dir, fmt.Sprintf("peak-heap-%d.pprof", a.pid()))); err == nil {
						profiled, profiledAt = kib, time.Now()
					}
				}
			}
		}
	}
}

// cpu is the agent's CPU time so far (user and system).
func (a *agentProc) cpu(b testing.TB) time.Duration {
	b.Helper()
	v, err := testenv.ProcessCPU(a.pid())
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// goMemstats scrapes the agent's go_memstats_* gauges (controller-runtime's registry carries
// the Go collector), by metric name.
func (a *agentProc) goMemstats(b testing.TB) map[string]float64 {
	b.Helper()
	resp, err := http.Get("http://" + a.metrics + "/metrics")
	if err != nil {
		b.Fatalf("scraping the agent's metrics: %v", err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "go_memstats_") {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if v, err := strconv.ParseFloat(val, 64); ok && err == nil {
			out[name] = v
		}
	}
	if err := sc.Err(); err != nil {
		b.Fatalf("reading the agent's metrics: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if _, ok := out["go_memstats_heap_inuse_bytes"]; !ok {
		b.Fatal("the agent's /metrics has no go_memstats_heap_inuse_bytes")
	}
	return out
}

// psql runs one query against the benchmark's database and returns its trimmed output.
func psql(ctx context.Context, url, sql string) (string, error) {
	out, err := exec.CommandContext(ctx, "psql", url, "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-c", sql).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("psql %q: %w: %s", sql, err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// exported counts the agent's rows and state rows (one per inventory and sink, written by
// every export, so an idle agent's first export shows too) in PostgreSQL, with query (psql, or
// a pollSession's). Before the first export the schema does not exist, which counts as nothing.
func exported(query func(sql string) (string, error)) (rows, states int, err error) {
	out, err := query(fmt.Sprintf(`SELECT (SELECT count(*) FROM kollect.rows WHERE cluster = '%[1]s'),
		(SELECT count(*) FROM kollect.rows_state WHERE cluster = '%[1]s')`, cluster))
	if err != nil {
		if strings.Contains(err.Error(), "does not exist") {
			return 0, 0, nil
		}
		return 0, 0, err
	}
	if _, err := fmt.Sscanf(out, "%d|%d", &rows, &states); err != nil {
		return 0, 0, fmt.Errorf("unexpected count output %q: %w", out, err)
	}
	return rows, states, nil
}

// psqlQuery runs each query in a psql of its own.
func psqlQuery(ctx context.Context, url string) func(string) (string, error) {
	return func(sql string) (string, error) { return psql(ctx, url, sql) }
}

// released counts the agent's "released start-up memory" log lines (--release-startup-memory-after).
func (a *agentProc) released() int {
	raw, _ := os.ReadFile(a.log)
	return strings.Count(string(raw), `"released start-up memory"`)
}

// releasedSettled reports whether the agent logged its release once the initial load settled.
func (a *agentProc) releasedSettled() bool {
	raw, _ := os.ReadFile(a.log)
	return strings.Contains(string(raw), `"msg":"released start-up memory","when":"settled"`)
}
