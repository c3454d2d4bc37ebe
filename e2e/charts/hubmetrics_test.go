package charts

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kollect.dev/testenv"
)

// TestHubMetricsNeedAToken: with the hub chart's default values nothing scrapes or exposes
// /metrics anonymously — no ServiceMonitor, no prometheus.io/scrape annotation — and the real
// kollect-hub run with the default Deployment's arguments answers /metrics on its API port
// only to an API token (401 without one). A ServiceMonitor cannot be rendered without the
// Secret of the token it sends.
func TestHubMetricsNeedAToken(t *testing.T) {
	t.Parallel() // its own control plane, servers and ports
	out, err := render(t, caseNamed(t, "hub-default"))
	if err != nil {
		t.Fatal(err)
	}
	objs := decode(t, out)
	if sm := find(objs, "ServiceMonitor", ""); len(sm) != 0 {
		t.Errorf("default values render a ServiceMonitor")
	}
	if strings.Contains(out, "prometheus.io/scrape") {
		t.Errorf("default values ask Prometheus to scrape anonymously (prometheus.io/scrape)")
	}
	if _, err := render(t, renderCase{chart: "hub", values: "serviceMonitor: {enabled: true}\n"}); err == nil ||
		!strings.Contains(err.Error(), "/metrics needs a viewer API token") {
		t.Errorf("a ServiceMonitor without a token Secret: %v, want a refusal", err)
	}

	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var hubArgs []string
	for _, a := range args(t, objs) {
		name, _, _ := strings.Cut(a, "=")
		switch name {
		case "--listen":
			hubArgs = append(hubArgs, fmt.Sprintf("--listen=127.0.0.1:%d", port))
		case "--data-dir":
			hubArgs = append(hubArgs, "--data-dir="+filepath.Join(dir, "data"))
		default:
			hubArgs = append(hubArgs, a)
		}
	}
	hub := start(t, "hub", binary(t, "kollect-hub"), nil, hubArgs...)
	var token []byte
	var hc *http.Client
	waitFor(t, hub, time.Minute, "the hub's CA and admin token", func() (bool, string) {
		caPEM, _ := os.ReadFile(filepath.Join(dir, "data", "pki", "ca.crt"))
		token, _ = os.ReadFile(filepath.Join(dir, "data", "admin-token"))
		if len(caPEM) == 0 || len(token) == 0 {
			return false, "not yet written"
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(caPEM)
		hc = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool,
			ServerName: "kollect-hub.kollect-system.svc"}}}
		return true, ""
	})
	get := func(bearer string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d/metrics", port), nil)
		if err != nil {
			t.Fatal(err)
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	waitFor(t, hub, time.Minute, "the hub serving", func() (bool, string) {
		code, body := get("")
		return code != 0, body
	})
	if code, body := get(""); code != http.StatusUnauthorized {
		t.Fatalf("/metrics without a token on the chart's hub: %d\n%s", code, body)
	}
	if code, body := get(strings.TrimSpace(string(token))); code != http.StatusOK || !strings.Contains(body, "kollect_hub_clusters") {
		t.Fatalf("/metrics with the admin token: %d\n%s", code, body)
	}
}
