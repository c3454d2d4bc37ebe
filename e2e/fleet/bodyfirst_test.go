package fleet

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// curlStalled POSTs 1 KiB to procedure with curl (HTTP/1.1, Connect's unary protocol) while
// declaring a body of 15 MB, and returns curl's output: the answer's body, then its HTTP
// status. curl waits for the answer after its 1 KiB, so the call ends only when the hub
// answers without the rest; the context is a safety net, and a hub that waited for the body
// fails the test.
func curlStalled(t *testing.T, h *hub, procedure, token string) string {
	t.Helper()
	dir := t.TempDir()
	ca, body := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "body")
	if err := os.WriteFile(ca, h.caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(body, []byte(strings.Repeat("\n", 1024)), 0o600); err != nil {
		t.Fatal(err)
	}
	port := h.addr[strings.LastIndex(h.addr, ":")+1:]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := []string{"-sS", "--http1.1", "--cacert", ca, "--resolve", "localhost:" + port + ":127.0.0.1",
		"--data-binary", "@" + body, "-H", "Content-Length: 15000000",
		"-H", "Content-Type: application/proto", "-H", "Connect-Protocol-Version: 1",
		"-w", "\n%{http_code}", "https://localhost:" + port + procedure}
	if token != "" {
		args = append(args, "-H", "Authorization: Bearer "+token)
	}
	out, _ := exec.CommandContext(ctx, "curl", args...).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("curl %s: the hub did not answer while the body was withheld", procedure)
	}
	return string(out)
}
