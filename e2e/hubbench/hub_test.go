package hubbench

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"
	"kollect.dev/testenv"
)

// hub is one kollect-hub process.
type hub struct {
	cmd        *exec.Cmd
	url        string
	pprof      string // host:port of its /debug/pprof/
	caPEM      []byte
	adminToken string
}

// hubFlags are the flags every benchmarked hub runs with: agents heartbeat every minute, so a
// cluster turns stale only after two and a half minutes without one; every simulated agent
// registers from 127.0.0.1 with one bootstrap token, so neither the per-address limit nor the
// token's use ceiling applies.
var hubFlags = []string{"--heartbeat-interval", "1m", "--stale-after", "150s", "--offline-after", "10m",
	"--register-burst", "0", "--bootstrap-token-max-uses", "0"}

// hubBinary builds kollect-hub once per benchmark run.
func hubBinary(b *testing.B) string {
	built, err := testenv.BuildCommands(b.TempDir(), "", "./hub/cmd/kollect-hub")
	if err != nil {
		b.Fatal(err)
	}
	return built[0]
}

// startHub starts a hub process on dataDir with store ("" for SQLite in dataDir) and Go's soft
// memory limit memLimit (GOMEMLIMIT; "" for none) and waits until it serves. Replicas of one PostgreSQL store share dataDir, and so their CA and serving
// certificate, as the chart's replicas share their TLS Secret; the first one started writes the
// admin token.
func startHub(b *testing.B, bin, dataDir, store, memLimit string) *hub {
	addr, err := freeAddr()
	if err != nil {
		b.Fatal(err)
	}
	pprofAddr, err := freeAddr()
	if err != nil {
		b.Fatal(err)
	}
	log, err := os.CreateTemp(dataDir, "hub-*.log")
	if err != nil {
		b.Fatal(err)
	}
	args := append([]string{"--listen", addr, "--data-dir", dataDir, "--pprof-bind-address", pprofAddr}, hubFlags...)
	if store != "" {
		args = append(args, "--store", store)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = os.Environ()
	if memLimit != "" {
		cmd.Env = append(cmd.Env, "GOMEMLIMIT="+memLimit)
	}
	// KOLLECT_BENCH_HUB_ENV (space-separated KEY=VALUE) measures the hubs with settings of
	// the runtime, e.g. GOGC, that the benchmark's own process should not take.
	cmd.Env = append(cmd.Env, strings.Fields(os.Getenv("KOLLECT_BENCH_HUB_ENV"))...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		log.Close()
		if dir := os.Getenv("KOLLECT_BENCH_PROFILE"); dir != "" {
			// The hub's log beside its profiles: the rollout's steps are logged with their times.
			if raw, err := os.ReadFile(log.Name()); err == nil {
				_ = os.WriteFile(filepath.Join(dir, filepath.Base(log.Name())), raw, 0o644)
			}
		}
		if b.Failed() {
			raw, _ := os.ReadFile(log.Name())
			b.Logf("hub log %s:\n%s", log.Name(), tail(raw, 8000))
		}
	})
	h := &hub{cmd: cmd, url: "https://" + strings.Replace(addr, "127.0.0.1", "localhost", 1), pprof: pprofAddr}
	deadline := time.Now().Add(60 * time.Second)
	for {
		tok, err1 := os.ReadFile(filepath.Join(dataDir, "admin-token"))
		ca, err2 := os.ReadFile(filepath.Join(dataDir, "pki", "ca.crt"))
		c, err3 := net.DialTimeout("tcp", addr, time.Second)
		if err1 == nil && err2 == nil && err3 == nil {
			c.Close()
			h.adminToken, h.caPEM = strings.TrimSpace(string(tok)), ca
			return h
		}
		if time.Now().After(deadline) {
			b.Fatalf("hub not up in 60 s: %v %v %v", err1, err2, err3)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func tail(raw []byte, n int) []byte {
	if len(raw) > n {
		return raw[len(raw)-n:]
	}
	return raw
}

// fleetClientHTTP is an HTTP client that trusts the hub's CA.
func (h *hub) fleetClientHTTP() *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(h.caPEM)
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: true}}
}

// fleetClient is a FleetService client with the admin token.
func (h *hub) fleetClient() fleetv1connect.FleetServiceClient {
	client := h.fleetClientHTTP()
	bearer := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+h.adminToken)
			return next(ctx, req)
		}
	})
	return fleetv1connect.NewFleetServiceClient(client, h.url, connect.WithInterceptors(bearer))
}

// cpu is the hub process's CPU time so far (user and system).
func (h *hub) cpu(b *testing.B) time.Duration {
	v, err := testenv.ProcessCPU(h.cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// memory is the hub process's resident set now and at its peak, in MiB.
func (h *hub) memory(b *testing.B) (rss, peak float64) {
	m, err := testenv.ProcessMemory(h.cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	return m["VmRSS"], m["VmHWM"]
}

// profile fetches a profile from the hub's pprof endpoint into dir/name (path is
// "profile?seconds=N" for CPU, "heap" for memory). It is how the figures in
// docs/performance.md were explained; KOLLECT_BENCH_PROFILE names the directory.
func (h *hub) profile(ctx context.Context, dir, name, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+h.pprof+"/debug/pprof/"+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("profile %s: %w", name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile %s: %s", name, resp.Status)
	}
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}
