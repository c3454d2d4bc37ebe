package security

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
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

	"kollect.dev/testenv"
)

// bins are kollect-agent, kollect-hub and kollect, built once as `make build` builds them.
var bins struct{ agent, hub, kollect string }

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kollect-security-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	built, err := testenv.BuildCommands(dir, "", "./agent/cmd/kollect-agent", "./hub/cmd/kollect-hub", "./agent/cmd/kollect")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins.agent, bins.hub, bins.kollect = built[0], built[1], built[2]
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a product process whose stdout and stderr go to one log file.
type proc struct {
	cmd *exec.Cmd
	log string
}

func startProc(t *testing.T, name, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{log: filepath.Join(t.TempDir(), name+".log")}
	f, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			raw, _ := os.ReadFile(p.log)
			keep := filepath.Join(os.TempDir(), "kollect-security-"+name+".log")
			_ = os.WriteFile(keep, raw, 0o600)
			t.Logf("%s log kept in %s (the secret is in it only if a leak was reported)", name, keep)
		}
	})
	return p
}

// stop ends the process (SIGTERM) and waits, so that its log is complete.
func (p *proc) stop() {
	if p.cmd != nil && p.cmd.Process != nil && p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		_ = p.cmd.Wait()
	}
}

func (p *proc) output() string {
	raw, _ := os.ReadFile(p.log)
	return string(raw)
}

// hub is the shipped kollect-hub with its SQLite store, read with net/http and hand-written
// JSON (Connect's JSON encoding), as a dashboard or any HTTP client reads it.
type hub struct {
	*proc
	addr, data, adminToken, pin string
	http                        *http.Client
}

func startHub(t *testing.T) *hub {
	t.Helper()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	h := &hub{addr: fmt.Sprintf("127.0.0.1:%d", port), data: filepath.Join(t.TempDir(), "data")}
	h.proc = startProc(t, "hub", bins.hub, nil, "--listen", h.addr, "--data-dir", h.data, "--log-level", "debug",
		"--heartbeat-interval", "1s", "--stale-after", "5s", "--offline-after", "20s", "--poll-interval", "500ms")
	waitFor(t, 30*time.Second, "the hub listening", func() (bool, string) {
		c, err := net.DialTimeout("tcp", h.addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil, fmt.Sprint(err)
	})
	caPEM, err := os.ReadFile(filepath.Join(h.data, "pki", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(caPEM)
	if block == nil {
		t.Fatal("the hub's CA is not PEM")
	}
	sum := sha256.Sum256(block.Bytes)
	h.pin = "sha256:" + hex.EncodeToString(sum[:])
	tok, err := os.ReadFile(filepath.Join(h.data, "admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	h.adminToken = strings.TrimSpace(string(tok))
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	h.http = &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}}}
	return h
}

// call invokes a FleetService method with Connect's JSON encoding and returns the raw answer.
func (h *hub) call(ctx context.Context, method string, in any) ([]byte, error) {
	body, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+h.addr+"/kollect.fleet.v1.FleetService/"+method, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+h.adminToken)
	resp, err := h.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return raw, fmt.Errorf("%s: %s: %s", method, resp.Status, raw)
	}
	return raw, nil
}

// get reads a path of the hub's HTTPS listener with the admin token (the dashboard's
// assets, /metrics); status and body are returned as they are.
func (h *hub) get(ctx context.Context, path string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+h.addr+path, nil)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+h.adminToken)
	resp, err := h.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}

// runCLI runs the kollect binary and returns its combined output; the exit code does not
// matter here, only what it prints.
func runCLI(t *testing.T, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bins.kollect, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("kollect %s: %v", strings.Join(args, " "), err)
	}
	return string(out)
}

// waitFor polls cond until it holds, failing the test after timeout with cond's last word.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
