package sinks

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"kollect.dev/testenv"
)

// agentProc is the kollect-agent process; stop and start keep its cache directory.
type agentProc struct {
	t  *testing.T
	cp *testenv.ControlPlane
	// name is the --cluster-name; the package's cluster when empty.
	name             string
	cacheDir, log    string
	metrics, healthz string
	// args are flags beyond the ones every run gets (the hub's, for instance).
	args []string
	// env is the environment beyond KUBECONFIG; nil is the test's own.
	env []string
	cmd *exec.Cmd
}

func newAgent(t *testing.T, cp *testenv.ControlPlane) *agentProc {
	mp, err := testenv.FreePort()
	must(t, err)
	hp, err := testenv.FreePort()
	must(t, err)
	a := &agentProc{t: t, cp: cp, cacheDir: t.TempDir(), log: filepath.Join(t.TempDir(), "agent.log"),
		metrics: fmt.Sprintf("127.0.0.1:%d", mp), healthz: fmt.Sprintf("127.0.0.1:%d", hp)}
	t.Cleanup(func() {
		if t.Failed() {
			raw, _ := os.ReadFile(a.log)
			keep := filepath.Join(os.TempDir(), "kollect-sinks-"+t.Name()+"-"+a.name+"-agent.log")
			_ = os.WriteFile(keep, raw, 0o644)
			lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
			if len(lines) > 40 {
				lines = lines[len(lines)-40:]
			}
			t.Logf("agent log (tail; all of it in %s):\n%s", keep, strings.Join(lines, "\n"))
		}
		a.stop()
	})
	return a
}

func (a *agentProc) start() {
	a.t.Helper()
	must(a.t, a.launch())
	must(a.t, a.waitReady(30*time.Second))
}

// launch starts the process, appending to its log, without waiting for it to be ready.
func (a *agentProc) launch() error {
	logFile, err := os.OpenFile(a.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	name := a.name
	if name == "" {
		name = cluster
	}
	a.cmd = exec.Command(agentBin, "--cluster-name", name, "--metrics-bind-address", a.metrics,
		"--health-probe-bind-address", a.healthz, "--cache-dir", a.cacheDir, "--allow-local-sinks")
	a.cmd.Args = append(a.cmd.Args, a.args...)
	env := a.env
	if env == nil {
		env = os.Environ()
	}
	a.cmd.Env = append(env, "KUBECONFIG="+a.cp.Kubeconfig)
	a.cmd.Stdout, a.cmd.Stderr = logFile, logFile
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return a.cmd.Start()
}

// waitReady waits until the agent's /readyz answers OK.
func (a *agentProc) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		resp, err := http.Get("http://" + a.healthz + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kollect-agent %s: /readyz not OK after %s: %v", a.name, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (a *agentProc) stop() {
	if a.cmd != nil && a.cmd.Process != nil {
		_ = a.cmd.Process.Signal(syscall.SIGTERM)
		_ = a.cmd.Wait()
	}
	a.cmd = nil
}

// scrape returns the agent's metric samples whose name starts with prefix, by label set.
func (a *agentProc) scrape(prefix string) (map[string]float64, error) {
	resp, err := http.Get("http://" + a.metrics + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	out := map[string]float64{}
	for _, line := range strings.Split(sb.String(), "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		var v float64
		if _, err := fmt.Sscan(line[i+1:], &v); err == nil {
			out[line[:i]] = v
		}
	}
	return out, nil
}

// exportCalls counts the agent's export calls per sink name (kollect_export_duration_seconds).
func (a *agentProc) exportCalls(t *testing.T) map[string]float64 {
	t.Helper()
	out, err := a.scrapeBySink("kollect_export_duration_seconds_count")
	must(t, err)
	if len(out) == 0 {
		t.Fatal("no kollect_export_duration_seconds_count samples with a sink label")
	}
	return out
}

// waitExportCalls waits until the agent has made an export call to every sink beyond the
// counts in before (kollect_export_duration_seconds_count, which counts calls that returned)
// and notBefore has passed; it returns the counts then. It is how a quiet window closes: on
// an observed call of every sink, not after a sleep.
func (a *agentProc) waitExportCalls(t *testing.T, ctx context.Context, sinks []*sinkUnderTest, before map[string]float64, notBefore time.Time, what string) map[string]float64 {
	t.Helper()
	deadline := time.Now().Add(resync + converge)
	if notBefore.After(time.Now()) {
		deadline = notBefore.Add(resync + converge)
	}
	var last map[string]float64
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if cur, err := a.scrapeBySink("kollect_export_duration_seconds_count"); err == nil {
			last = cur
			all := true
			for _, s := range sinks {
				if cur[s.name] <= before[s.name] {
					all = false
				}
			}
			if all && !time.Now().Before(notBefore) {
				return cur
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("%s: export calls per sink %v, want each above %v: without the calls the window proves nothing", what, last, before)
	return nil
}

// bySink is scrapeBySink failing the test on a scrape error.
func (a *agentProc) bySink(t *testing.T, metric string) map[string]float64 {
	t.Helper()
	out, err := a.scrapeBySink(metric)
	must(t, err)
	return out
}

// scrapeBySink sums a metric's samples per sink name (the last part of the sink label,
// family/namespace/name); a sink without samples is absent.
func (a *agentProc) scrapeBySink(metric string) (map[string]float64, error) {
	samples, err := a.scrape(metric)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for labels, v := range samples {
		i := strings.IndexByte(labels, '{')
		if i < 0 || labels[:i] != metric {
			continue
		}
		for _, part := range strings.Split(strings.Trim(labels[i+1:], "}"), ",") {
			if k, val, ok := strings.Cut(part, "="); ok && k == "sink" {
				name := strings.Trim(val, `"`)
				if j := strings.LastIndexByte(name, '/'); j >= 0 {
					name = name[j+1:]
				}
				out[name] += v
			}
		}
	}
	return out, nil
}

// waitCollected waits until the restarted agent's collector holds every object again.
func (a *agentProc) waitCollected(t *testing.T, ctx context.Context, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var last map[string]float64
	for time.Now().Before(deadline) && ctx.Err() == nil {
		samples, err := a.scrape("kollect_watched_objects")
		if err == nil {
			total := 0.0
			for _, v := range samples {
				total += v
			}
			if int(total) >= n {
				return
			}
			last = samples
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("the restarted agent never watched %d objects: %v", n, last)
}

// tcpUp reports whether addr accepts connections.
func tcpUp(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		c.Close()
	}
	return err == nil
}
