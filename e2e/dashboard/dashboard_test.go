package dashboard

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"kollect.dev/e2e/dashboard/fleetsim"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// workloads is the bundle the fleet starts with (docs/examples/deployments-to-git.yaml).
func workloads(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "docs", "examples", "deployments-to-git.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// TestHubServesDashboardBesideAPI checks the hub's router: the dashboard at / and deep links,
// while the Connect API, /healthz and /metrics keep their own handlers.
func TestHubServesDashboardBesideAPI(t *testing.T) {
	h := startHub(t)
	hc := h.httpClient()
	get := func(path string, header http.Header) (*http.Response, string) {
		req, _ := http.NewRequest(http.MethodGet, h.url+path, nil)
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	for _, p := range []string{"/", "/clusters/prod-eu-1", "/bundles/workloads"} {
		resp, body := get(p, nil)
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, `<div id="root">`) {
			t.Fatalf("%s: status %d body %.200s", p, resp.StatusCode, body)
		}
	}
	if resp, body := get("/healthz", nil); resp.StatusCode != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz: %d %q", resp.StatusCode, body)
	}
	// /metrics lists every cluster and sink: never to anonymous callers on the API port.
	if resp, body := get("/metrics", nil); resp.StatusCode != http.StatusUnauthorized || strings.Contains(body, "kollect_hub_clusters") {
		t.Fatalf("/metrics without a token: %d %.200s, want 401 and no series", resp.StatusCode, body)
	}
	if resp, body := get("/metrics", http.Header{"Authorization": {"Bearer " + h.adminToken}}); resp.StatusCode != http.StatusOK ||
		!strings.Contains(body, "kollect_hub_clusters") {
		t.Fatalf("/metrics with a token: %d %.200s", resp.StatusCode, body)
	}
	if _, err := h.fleet(h.adminToken).ListClusters(context.Background(), connect.NewRequest(&fleetv1.ListClustersRequest{})); err != nil {
		t.Fatalf("ListClusters through the same router: %v", err)
	}
}

// TestDashboard runs the browser test (web/e2e) against a hub with a simulated fleet.
func TestDashboard(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	h := startHub(t)
	admin := h.fleet(h.adminToken)

	boot, err := admin.CreateBootstrapToken(ctx, connect.NewRequest(&fleetv1.CreateBootstrapTokenRequest{
		Description: "simulated fleet", Ttl: durationpb.New(time.Hour), MaxUses: 100}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{
		Name: "workloads", Description: "Deployments of team-a to git", Manifests: workloads(t),
		Message: "first revision"})); err != nil {
		t.Fatal(err)
	}
	// prod-config selects only the env=prod clusters, which keep passing the rollout gates.
	prod := strings.NewReplacer("name: deployments", "name: prod-deployments", "name: workloads", "name: prod-workloads",
		"inventory: workloads", "inventory: prod-workloads", "name: inventory-repo", "name: prod-repo").Replace(workloads(t))
	if _, err := admin.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{
		Name: "prod-config", Description: "Production inventory", Manifests: prod, Message: "first revision",
		ClusterSelector: &fleetv1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}})); err != nil {
		t.Fatal(err)
	}
	fingerprint, err := os.ReadFile(filepath.Join(h.dir, "data", "ca-fingerprint"))
	if err != nil {
		t.Fatal(err)
	}

	sim, err := fleetsim.New(h.url, h.caPEM, boot.Msg.GetSecret(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	for _, c := range fleetsim.Demo() {
		if err := sim.Add(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/clusters", fleetsim.ControlHandler(sim))
	mux.Handle("/clusters/", fleetsim.ControlHandler(sim))
	mux.Handle("/hub/restart", h.restartHandler())
	ctl := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = ctl.Serve(ln) }()
	t.Cleanup(func() { _ = ctl.Close() })

	env := append(os.Environ(),
		"KOLLECT_HUB_URL="+h.url,
		"KOLLECT_ADMIN_TOKEN="+h.adminToken,
		"KOLLECT_SIM_URL=http://"+ln.Addr().String(),
		"KOLLECT_CHROMIUM="+tools.chromium,
		"KOLLECT_CA_FINGERPRINT="+strings.TrimSpace(string(fingerprint)),
	)

	if os.Getenv("KOLLECT_SCREENSHOTS") == "1" {
		dir, err := filepath.Abs(filepath.Join(root, "docs", "images"))
		if err != nil {
			t.Fatal(err)
		}
		env = append(env, "KOLLECT_SCREENSHOT_DIR="+dir)
	}
	cmd := exec.CommandContext(ctx, tools.node, "--test", "--test-reporter=spec", "e2e/dashboard.test.mjs")
	cmd.Dir = filepath.Join(root, "web")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	t.Logf("browser test output:\n%s", out)
	if err != nil {
		t.Fatalf("browser test failed: %v", err)
	}
}

// TestDashboardAtScale runs web/e2e/scale.test.mjs against a hub with 1,000 registered clusters.
func TestDashboardAtScale(t *testing.T) {
	const clusters = 1000
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	h := startHub(t)
	boot, err := h.fleet(h.adminToken).CreateBootstrapToken(ctx, connect.NewRequest(&fleetv1.CreateBootstrapTokenRequest{
		Description: "scale test", Ttl: durationpb.New(time.Hour), MaxUses: clusters}))
	if err != nil {
		t.Fatal(err)
	}
	sim, err := fleetsim.New(h.url, h.caPEM, boot.Msg.GetSecret(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	start := time.Now()
	var (
		wg   sync.WaitGroup
		slot = make(chan struct{}, 8)
		errs = make(chan error, clusters)
	)
	for i := range clusters {
		wg.Add(1)
		slot <- struct{}{}
		go func() {
			defer func() { <-slot; wg.Done() }()
			c := fleetsim.Healthy(fmt.Sprintf("scale-%04d", i), map[string]string{"shard": fmt.Sprint(i % 10)}, int64(100+i))
			errs <- sim.Register(ctx, c)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("registered %d clusters in %v", clusters, time.Since(start).Round(time.Millisecond))
	cmd := exec.CommandContext(ctx, tools.node, "--test", "--test-reporter=spec", "e2e/scale.test.mjs")
	cmd.Dir = filepath.Join(root, "web")
	cmd.Env = append(os.Environ(), "KOLLECT_HUB_URL="+h.url, "KOLLECT_ADMIN_TOKEN="+h.adminToken,
		"KOLLECT_CHROMIUM="+tools.chromium, fmt.Sprintf("KOLLECT_CLUSTERS=%d", clusters))
	out, err := cmd.CombinedOutput()
	t.Logf("browser test output:\n%s", out)
	if err != nil {
		t.Fatalf("browser test failed: %v", err)
	}
}
