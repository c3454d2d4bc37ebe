package hubbench

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
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

// manifests is the bundle each iteration releases; the iteration number goes into the match
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

// agents is how many simulated agents join; KOLLECT_BENCH_AGENTS overrides the 1,000 default.
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

// BenchmarkRolloutHubCPU: one operation is a rollout without gates (only "applied",
// min_healthy 0) in 10 waves of 10% to every simulated agent, from ApplyBundle with hold to
// COMPLETED. It reports the hub process's own CPU seconds and resident memory.
func BenchmarkRolloutHubCPU(b *testing.B) {
	n := agents(b)
	h := startHub(b)
	ctx := context.Background()
	admin := h.fleetClient()

	boot, err := admin.CreateBootstrapToken(ctx, connect.NewRequest(&fleetv1.CreateBootstrapTokenRequest{
		Description: "hubbench", MaxUses: int64(n)}))
	if err != nil {
		b.Fatal(err)
	}
	sim, err := fleetsim.New(h.url, h.caPEM, boot.Msg.GetSecret(), time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(sim.Close)
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
			c := fleetsim.Cluster{Name: fmt.Sprintf("c%05d", i), Labels: map[string]string{"env": "bench"},
				AgentVersion: "bench", K8sVersion: "v1.37.2"}
			if err := sim.Add(ctx, c); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	b.Logf("%d simulated agents registered; hub RSS %.0f MiB", n, h.rssMiB(b))

	strategy := &fleetv1.RolloutStrategy{
		WaveSize: &fleetv1.WaveSize{Size: &fleetv1.WaveSize_Percent{Percent: 10}},
		Gates:    &fleetv1.RolloutGates{SkipInventoriesReady: true, SkipSinkErrors: true},
	}
	selector := &fleetv1.LabelSelector{MatchLabels: map[string]string{"env": "bench"}}
	// Release revision 1 at once so that every later iteration is a move between revisions.
	if _, err := admin.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{
		Name: "bench", Manifests: fmt.Sprintf(manifests, 0), ClusterSelector: selector})); err != nil {
		b.Fatal(err)
	}
	iteration := 0
	var worst time.Duration
	cpu0 := h.cpu(b)
	for b.Loop() {
		iteration++
		t0 := time.Now()
		if _, err := admin.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{
			Name: "bench", Manifests: fmt.Sprintf(manifests, iteration), ClusterSelector: selector, Hold: true})); err != nil {
			b.Fatal(err)
		}
		started, err := admin.StartRollout(ctx, connect.NewRequest(&fleetv1.StartRolloutRequest{Bundle: "bench", Strategy: strategy}))
		if err != nil {
			b.Fatal(err)
		}
		waitCompleted(b, admin, started.Msg.GetRollout().GetId())
		worst = max(worst, time.Since(t0))
	}
	b.ReportMetric((h.cpu(b)-cpu0).Seconds()/float64(b.N), "hub-CPU-s/op")
	b.ReportMetric(float64(worst.Milliseconds()), "worst-ms")
	b.ReportMetric(float64(n), "agents")
	b.ReportMetric(h.rssMiB(b), "hub-RSS-MiB")
}

func waitCompleted(b *testing.B, admin fleetv1connect.FleetServiceClient, id int64) {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		got, err := admin.GetRollout(context.Background(), connect.NewRequest(&fleetv1.GetRolloutRequest{Id: id}))
		if err != nil {
			b.Fatal(err)
		}
		r := got.Msg.GetRollout()
		switch r.GetPhase() {
		case fleetv1.RolloutPhase_ROLLOUT_PHASE_COMPLETED:
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

// hub is a kollect-hub process.
type hub struct {
	cmd        *exec.Cmd
	url        string
	caPEM      []byte
	adminToken string
}

func startHub(b *testing.B) *hub {
	dir := b.TempDir()
	built, err := testenv.BuildCommands(dir, "", "./hub/cmd/kollect-hub")
	if err != nil {
		b.Fatal(err)
	}
	bin := built[0]
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	log, err := os.Create(filepath.Join(dir, "hub.log"))
	if err != nil {
		b.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	cmd := exec.Command(bin, "--listen", addr, "--data-dir", data,
		"--register-burst", "0") // every simulated agent registers from 127.0.0.1
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		log.Close()
		if b.Failed() {
			raw, _ := os.ReadFile(log.Name())
			b.Logf("hub log:\n%s", raw)
		}
	})
	h := &hub{cmd: cmd, url: "https://" + strings.Replace(addr, "127.0.0.1", "localhost", 1)}
	deadline := time.Now().Add(30 * time.Second)
	for {
		tok, err1 := os.ReadFile(filepath.Join(data, "admin-token"))
		ca, err2 := os.ReadFile(filepath.Join(data, "pki", "ca.crt"))
		c, err3 := net.DialTimeout("tcp", addr, time.Second)
		if err1 == nil && err2 == nil && err3 == nil {
			c.Close()
			h.adminToken, h.caPEM = strings.TrimSpace(string(tok)), ca
			return h
		}
		if time.Now().After(deadline) {
			b.Fatalf("hub not up in 30 s: %v %v %v", err1, err2, err3)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (h *hub) fleetClient() fleetv1connect.FleetServiceClient {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(h.caPEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: true}}
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

// rssMiB is the hub process's resident set.
func (h *hub) rssMiB(b *testing.B) float64 {
	v, err := testenv.ProcessRSSMiB(h.cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	return v
}
