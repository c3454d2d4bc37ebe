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

// TestHubRuns runs the real kollect-hub with the arguments of the chart's default Deployment
// (only the listen address and the data directory differ, as the pod's volume and port) and
// dials it as an in-cluster agent would: by the Service's DNS name, verifying the certificate
// against the CA the hub generated. The chart's --hosts must make that name valid.
func TestHubRuns(t *testing.T) {
	t.Parallel() // its own control plane, servers and ports
	out, err := render(t, caseNamed(t, "hub-default"))
	if err != nil {
		t.Fatal(err)
	}
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var hubArgs []string
	for _, a := range args(t, decode(t, out)) {
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

	// Wait for the CA, then trust only it, and dial the loopback port under the Service's name.
	caFile := filepath.Join(dir, "data", "pki", "ca.crt")
	var resp *http.Response
	for deadline := time.Now().Add(60 * time.Second); ; {
		hub.alive(t)
		time.Sleep(200 * time.Millisecond)
		if caPEM, err := os.ReadFile(caFile); err == nil {
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(caPEM)
			hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
				RootCAs: pool, ServerName: "kollect-hub.kollect-system.svc"}}}
			if resp, err = hc.Get(fmt.Sprintf("https://127.0.0.1:%d/healthz", port)); err == nil {
				break
			} else if strings.Contains(err.Error(), "certificate") {
				t.Fatalf("the hub's certificate does not serve the Service name: %v", err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the hub did not serve /healthz within 60s")
		}
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %s %s", resp.Status, body)
	}
	// What the chart's NOTES and README tell users to look for in the log.
	raw := hub.output()
	for _, want := range []string{"admin API token", "Agents pin the hub CA: sha256:"} {
		if !strings.Contains(raw, want) {
			t.Errorf("hub log lacks %q, which the chart's NOTES tell users to grep for:\n%s", want, raw)
		}
	}
	token, err := os.ReadFile(filepath.Join(dir, "data", "admin-token"))
	if err != nil {
		t.Errorf("admin-token in the data directory: %v", err)
	} else if tok := strings.TrimSpace(string(token)); tok == "" || strings.Contains(raw, tok) {
		t.Errorf("the hub's log shows its admin token (or the token file is empty)")
	}
}

// caseNamed returns the render case of that name.
func caseNamed(t *testing.T, name string) renderCase {
	t.Helper()
	for _, c := range cases {
		if c.name == name {
			return c
		}
	}
	t.Fatalf("no render case %q", name)
	return renderCase{}
}
