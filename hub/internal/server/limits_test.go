package server_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"kollect.dev/hub/internal/server"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// TestRequestSizeLimitsPerProcedure: each procedure reads at most its own limit — a
// registration or a listing far smaller than a heartbeat, a heartbeat smaller than a bundle —
// and a larger request is refused with ResourceExhausted before it is decoded.
func TestRequestSizeLimitsPerProcedure(t *testing.T) {
	t.Parallel()
	h := startHub(t, "")
	ctx := context.Background()
	big := func(n int) string { return strings.Repeat("x", n) }
	agent, _ := h.register(t, h.bootstrapToken(t, time.Hour, 1, false).GetSecret(), "alpha", nil)

	_, _, err := h.tryRegister("kbt_"+big(100<<10), "alpha", nil)
	wantCode(t, err, connect.CodeResourceExhausted, "a 100 KiB registration")
	_, err = h.admin.ListClusters(ctx, connect.NewRequest(&fleetv1.ListClustersRequest{LabelSelector: big(2 << 20)}))
	wantCode(t, err, connect.CodeResourceExhausted, "a 2 MiB listing")
	_, err = agent.ReportStatus(ctx, connect.NewRequest(&fleetv1.ReportStatusRequest{Status: &fleetv1.AgentStatus{AgentVersion: big(9 << 20)}}))
	wantCode(t, err, connect.CodeResourceExhausted, "a 9 MiB heartbeat")

	// Within their limits the same procedures read the request (and judge its content).
	_, err = agent.ReportStatus(ctx, connect.NewRequest(&fleetv1.ReportStatusRequest{Status: &fleetv1.AgentStatus{AgentVersion: big(2 << 20)}}))
	if err != nil {
		t.Fatalf("a 2 MiB heartbeat: %v", err)
	}
	_, err = h.admin.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{Name: "big", Manifests: "# " + big(9<<20)}))
	if connect.CodeOf(err) == connect.CodeResourceExhausted {
		t.Fatalf("a 9 MiB bundle was refused for its size: %v", err)
	}
}

// TestConnectionTimeouts: a client that never finishes its request headers, and a connection
// left idle after its request, are closed by the hub.
func TestConnectionTimeouts(t *testing.T) {
	t.Parallel()
	h := startHub(t, "", func(c *server.Config) {
		c.ReadHeaderTimeout, c.IdleTimeout = 200*time.Millisecond, 200*time.Millisecond
	})
	dial := func() *tls.Conn {
		t.Helper()
		cfg := h.tls.Clone()
		cfg.NextProtos = []string{"http/1.1"}
		c, err := tls.Dial("tcp", strings.TrimPrefix(h.url, "https://"), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		// Only a safety net for a hub that never closes: the assertion is the close itself.
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		return c
	}
	closed := func(r io.Reader, what string) {
		t.Helper()
		_, err := io.ReadAll(r)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("%s: the hub kept the connection open", what)
		}
	}

	slow := dial()
	if _, err := io.WriteString(slow, "GET /healthz HTTP/1.1\r\nHost: hub\r\n"); err != nil {
		t.Fatal(err)
	}
	closed(slow, "unfinished request headers")

	idle := dial()
	if _, err := io.WriteString(idle, "GET /healthz HTTP/1.1\r\nHost: hub\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(idle)
	status, err := br.ReadString('\n')
	if err != nil || !strings.Contains(status, "200") {
		t.Fatalf("healthz: %q %v", status, err)
	}
	closed(br, "an idle keep-alive connection")
}

// TestStreamCapPerAgent: one cluster's agent may hold MaxStreamsPerAgent configuration
// streams; one more is refused with ResourceExhausted until one of them ends.
func TestStreamCapPerAgent(t *testing.T) {
	t.Parallel()
	h := startHub(t, "", func(c *server.Config) { c.MaxStreamsPerAgent = 2 })
	agent, _ := h.register(t, h.bootstrapToken(t, time.Hour, 1, false).GetSecret(), "alpha", nil)
	first := watch(t, agent)
	first.next(t)
	watch(t, agent).next(t)
	third := watch(t, agent)
	select {
	case err := <-third.err:
		wantCode(t, err, connect.CodeResourceExhausted, "a third stream")
	case m := <-third.msgs:
		t.Fatalf("a third stream received %v", m)
	case <-time.After(10 * time.Second):
		t.Fatal("the third stream was neither refused nor served")
	}
	first.cancel()
	eventually(t, func() error {
		if n := h.srv.Connected(); n != 1 {
			return errors.New("the closed stream is still counted")
		}
		return nil
	})
	watch(t, agent).next(t)
}
