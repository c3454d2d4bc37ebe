package server_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"kollect.dev/hub/internal/server"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"
)

// rawCall sends a Connect unary request over its own HTTP/1.1 connection, declaring a body of
// declared bytes but sending only sent of them, and returns the hub's answer. The connection's
// deadline is only a safety net: a hub that waits for the rest of the body fails the test.
func rawCall(t *testing.T, h *testHub, procedure, token string, declared, sent int) (*http.Response, error) {
	t.Helper()
	cfg := h.tls.Clone()
	cfg.NextProtos = []string{"http/1.1"}
	c, err := tls.Dial("tcp", strings.TrimPrefix(h.url, "https://"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: hub\r\nContent-Type: application/proto\r\n"+
		"Connect-Protocol-Version: 1\r\nContent-Length: %d\r\n", procedure, declared)
	if token != "" {
		head += "Authorization: Bearer " + token + "\r\n"
	}
	if _, err := io.WriteString(c, head+"\r\n"+strings.Repeat("\x0a", sent)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: the hub did not answer while the client withheld the body", procedure)
	}
	if resp != nil {
		t.Cleanup(func() { resp.Body.Close() })
	}
	return resp, err
}

// TestRefusedBeforeTheBody: a call without a valid credential, or whose token's role no request
// of the procedure could need, is answered before the hub reads its body (the client declares
// 15 MB, sends 1 KiB and waits); an authenticated call's body must arrive within
// RequestReadTimeout; an open configuration stream outlives that timeout.
func TestRefusedBeforeTheBody(t *testing.T) {
	t.Parallel()
	h := startHub(t, "", func(c *server.Config) { c.RequestReadTimeout = 300 * time.Millisecond })
	ctx := context.Background()
	agent, _ := h.register(t, h.bootstrapToken(t, time.Hour, 1, false).GetSecret(), "alpha", nil)
	stream := watch(t, agent)
	stream.next(t)
	viewer, err := h.admin.CreateAPIToken(ctx, connect.NewRequest(&fleetv1.CreateAPITokenRequest{Name: "viewer", Role: fleetv1.Role_ROLE_VIEWER}))
	if err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		what, procedure, token string
		status                 int
		code                   string
	}{
		{"no token", fleetv1connect.FleetServiceApplyBundleProcedure, "", http.StatusUnauthorized, "unauthenticated"},
		{"an unknown token", fleetv1connect.FleetServiceApplyBundleProcedure, "kat_unknown", http.StatusUnauthorized, "unauthenticated"},
		{"a viewer's token", fleetv1connect.FleetServiceApplyBundleProcedure, viewer.Msg.GetSecret(), http.StatusForbidden, "permission_denied"},
		{"an unknown agent credential", fleetv1connect.AgentServiceReportStatusProcedure, "kac_unknown", http.StatusUnauthorized, "unauthenticated"},
		{"no agent credential", fleetv1connect.AgentServiceReportPreviewProcedure, "", http.StatusUnauthorized, "unauthenticated"},
	} {
		resp, err := rawCall(t, h, c.procedure, c.token, 15_000_000, 1024)
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode != c.status || !strings.Contains(string(body), `"code":"`+c.code+`"`) {
			t.Fatalf("%s: answered %d %s, want %d %s", c.what, resp.StatusCode, body, c.status, c.code)
		}
	}

	// Admitted, then the body stalls: the call ends without the rest (an error answer, or the
	// connection closed) — never a hub waiting for it.
	resp, err := rawCall(t, h, fleetv1connect.FleetServiceApplyBundleProcedure, h.srv.AdminToken, 1000, 10)
	if err == nil && resp.StatusCode == http.StatusOK {
		t.Fatalf("a stalled body was served: %d", resp.StatusCode)
	}

	// The stream opened before the stall is still served: its request was read to its end.
	if _, err := h.admin.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{Name: "base", Manifests: goodBundle})); err != nil {
		t.Fatal(err)
	}
	if got := stream.next(t); len(got.GetBundles()) != 1 {
		t.Fatalf("after the stall, the stream got %v", got)
	}
}
