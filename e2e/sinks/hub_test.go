package sinks

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
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/testenv"
)

// hubProc is the shipped kollect-hub with its SQLite store. The suite reads it with plain
// net/http and hand-written JSON (Connect's JSON encoding of FleetService), not with the
// generated client, so that what it checks is what any HTTP client sees.
type hubProc struct {
	addr, dir         string
	adminToken, pin   string
	http              *http.Client
	cmd               *exec.Cmd
	logPath, dataPath string
}

// startHub starts kollect-hub on a free port, telling agents to heartbeat every second; args
// are more flags.
func startHub(t *testing.T, args ...string) (*hubProc, error) {
	port, err := testenv.FreePort()
	if err != nil {
		return nil, err
	}
	dir := t.TempDir()
	h := &hubProc{addr: fmt.Sprintf("127.0.0.1:%d", port), dir: dir, logPath: filepath.Join(dir, "hub.log"),
		dataPath: filepath.Join(dir, "data")}
	logFile, err := os.Create(h.logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	h.cmd = exec.Command(hubBin, "--listen", h.addr, "--data-dir", h.dataPath, "--heartbeat-interval", "1s",
		"--stale-after", "5s", "--offline-after", "20s", "--poll-interval", "500ms")
	h.cmd.Args = append(h.cmd.Args, args...)
	h.cmd.Stdout, h.cmd.Stderr = logFile, logFile
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := h.cmd.Start(); err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		_ = h.cmd.Process.Signal(syscall.SIGTERM)
		_ = h.cmd.Wait()
		if t.Failed() {
			raw, _ := os.ReadFile(h.logPath)
			t.Logf("hub log (tail):\n%s", lastLines(string(raw), 20))
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for !tcpUp(h.addr) {
		if time.Now().After(deadline) {
			raw, _ := os.ReadFile(h.logPath)
			return nil, fmt.Errorf("kollect-hub did not listen within 30s:\n%s", raw)
		}
		time.Sleep(100 * time.Millisecond)
	}
	caPEM, err := os.ReadFile(filepath.Join(h.dataPath, "pki", "ca.crt"))
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(caPEM)
	if block == nil {
		return nil, fmt.Errorf("the hub's CA is not PEM")
	}
	sum := sha256.Sum256(block.Bytes)
	h.pin = "sha256:" + hex.EncodeToString(sum[:])
	tok, err := os.ReadFile(filepath.Join(h.dataPath, "admin-token"))
	if err != nil {
		return nil, err
	}
	h.adminToken = strings.TrimSpace(string(tok))
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	h.http = &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}}}
	return h, nil
}

// call invokes a FleetService method with Connect's JSON encoding: POST, application/json,
// the admin token as bearer.
func (h *hubProc) call(ctx context.Context, method string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+h.addr+"/kollect.fleet.v1.FleetService/"+method, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+h.adminToken)
	resp, err := h.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", method, resp.Status, raw)
	}
	return json.Unmarshal(raw, out)
}

// agentFlags prepares what an operator prepares for an agent to join the hub (a bootstrap
// token in the Secret the agent reads) and returns the agent's hub flags.
func (h *hubProc) agentFlags(ctx context.Context, c client.Client) ([]string, error) {
	var tok struct{ Secret string }
	if err := h.call(ctx, "CreateBootstrapToken", map[string]any{"description": "e2e/sinks", "ttl": "3600s", "maxUses": 1}, &tok); err != nil {
		return nil, err
	}
	if tok.Secret == "" {
		return nil, fmt.Errorf("CreateBootstrapToken returned no secret")
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kollect-system"}}); err != nil {
		return nil, err
	}
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kollect-system", Name: "kollect-hub-bootstrap"},
		StringData: map[string]string{"token": tok.Secret}}); err != nil {
		return nil, err
	}
	return []string{"--hub-url", "https://" + h.addr, "--hub-ca-fingerprint", h.pin, "--pod-namespace", "kollect-system"}, nil
}

// hubSink is a SinkStatus of the heartbeat as the JSON encoding spells it.
type hubSink struct {
	Kind, Namespace, Name, Type                 string
	LastSuccessTime, LastAttemptTime, LastError string
	ErrorClass                                  string
}

// clusterSinks reads a cluster's sink statuses from its last heartbeat (GetCluster), by name.
func (h *hubProc) clusterSinks(ctx context.Context, name string) (map[string]hubSink, error) {
	var out struct {
		Status struct{ Sinks []hubSink }
	}
	if err := h.call(ctx, "GetCluster", map[string]string{"name": name}, &out); err != nil {
		return nil, err
	}
	m := map[string]hubSink{}
	for _, s := range out.Status.Sinks {
		m[s.Name] = s
	}
	return m, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
