package server_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"kollect.dev/hub/internal/health"
	"kollect.dev/hub/internal/ratelimit"
	"kollect.dev/hub/internal/server"
	"kollect.dev/proto/capin"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"
)

// clock is the hub's clock in tests: real time plus an offset tests move forward.
type clock struct{ offset atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

// testHub is a hub serving real TLS on 127.0.0.1, reached with real Connect clients that pin
// its generated CA.
type testHub struct {
	t     *testing.T
	srv   *server.Server
	url   string
	clock *clock
	admin fleetv1connect.FleetServiceClient
	// registrar is one client for every Register call: an agent registers once, and a
	// connection per registration would hold two file descriptors per simulated agent.
	registrar fleetv1connect.AgentServiceClient
	// tls pins the hub's CA as agents do (kollect.dev/proto/capin).
	tls  *tls.Config
	stop func()
}

type hubOption func(*server.Config)

func startHub(t testing.TB, dataDir string, opts ...hubOption) *testHub {
	t.Helper()
	return startHubAt(t, dataDir, "127.0.0.1:0", opts...)
}

// startHubAt is startHub listening on addr: a hub restarted on its data directory and
// address is reached again by the agents of the one before.
func startHubAt(t testing.TB, dataDir, addr string, opts ...hubOption) *testHub {
	t.Helper()
	if dataDir == "" {
		dataDir = t.TempDir()
	}
	clk := &clock{}
	cfg := server.Config{
		DataDir: dataDir, Hosts: []string{"127.0.0.1"}, Now: clk.Now,
		Thresholds:   health.Thresholds{StaleAfter: time.Minute, OfflineAfter: 10 * time.Minute},
		PollInterval: 200 * time.Millisecond, FleetInterval: 100 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		// Every simulated agent calls from 127.0.0.1: the per-address limits are off unless a
		// test sets them (TestRateLimits).
		RegisterLimit: ratelimit.Limit{Burst: -1}, AuthFailureLimit: ratelimit.Limit{Burst: -1},
		// Benchmarks register thousands of clusters with one token.
		BootstrapMaxUses: -1,
	}
	for _, o := range opts {
		o(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := server.New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	pinned, err := capin.ClientConfig(srv.Identity().Fingerprint, "127.0.0.1")
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	h := &testHub{srv: srv, url: "https://" + ln.Addr().String(), clock: clk, tls: pinned}
	var stopped bool
	h.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("hub stopped with %v", err)
		}
		srv.Close()
	}
	t.Cleanup(h.stop)
	if srv.AdminToken != "" {
		h.admin = h.fleet(srv.AdminToken)
	}
	h.registrar = h.agent("")
	return h
}

// httpClient returns a client with its own HTTP/2 connection pool, like a separate agent.
func (h *testHub) httpClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig:   h.tls.Clone(),
		ForceAttemptHTTP2: true,
	}}
}

// bearer adds "Authorization: Bearer <token>" to every call, unary and streaming.
type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+string(b))
		return next(ctx, req)
	}
}

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", "Bearer "+string(b))
		return conn
	}
}

func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

func (h *testHub) fleet(token string, opts ...connect.ClientOption) fleetv1connect.FleetServiceClient {
	return fleetv1connect.NewFleetServiceClient(h.httpClient(), h.url, append(opts, connect.WithInterceptors(bearer(token)))...)
}

func (h *testHub) agent(credential string) fleetv1connect.AgentServiceClient {
	var opts []connect.ClientOption
	if credential != "" {
		opts = append(opts, connect.WithInterceptors(bearer(credential)))
	}
	return fleetv1connect.NewAgentServiceClient(h.httpClient(), h.url, opts...)
}

// bootstrapToken creates a bootstrap token as admin; maxUses 0 means as many as a test needs
// (a million: the hub itself makes 0 one use).
func (h *testHub) bootstrapToken(t testing.TB, ttl time.Duration, maxUses int64, allowReplace bool) *fleetv1.CreateBootstrapTokenResponse {
	t.Helper()
	if maxUses == 0 {
		maxUses = 1_000_000
	}
	resp, err := h.admin.CreateBootstrapToken(context.Background(), connect.NewRequest(&fleetv1.CreateBootstrapTokenRequest{
		Description: "test", Ttl: durationpb.New(ttl), MaxUses: maxUses, AllowReplace: allowReplace}))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Msg
}

// register registers a cluster and returns a client carrying its credential.
func (h *testHub) register(t testing.TB, token, name string, labels map[string]string) (fleetv1connect.AgentServiceClient, string) {
	t.Helper()
	agent, cred, err := h.tryRegister(token, name, labels)
	if err != nil {
		t.Fatal(err)
	}
	return agent, cred
}

// tryRegister is register for goroutines other than the test's.
func (h *testHub) tryRegister(token, name string, labels map[string]string) (fleetv1connect.AgentServiceClient, string, error) {
	resp, err := h.registrar.Register(context.Background(), connect.NewRequest(&fleetv1.RegisterRequest{
		ClusterName: name, Labels: labels, BootstrapToken: token, AgentVersion: "v0.1.0", KubernetesVersion: "v1.37.2"}))
	if err != nil {
		return nil, "", fmt.Errorf("registering %s: %w", name, err)
	}
	return h.agent(resp.Msg.GetCredential()), resp.Msg.GetCredential(), nil
}

// apiToken creates an API token with a role as admin and returns a client using it.
func (h *testHub) apiToken(t *testing.T, name string, role fleetv1.Role) fleetv1connect.FleetServiceClient {
	t.Helper()
	resp, err := h.admin.CreateAPIToken(context.Background(), connect.NewRequest(&fleetv1.CreateAPITokenRequest{Name: name, Role: role}))
	if err != nil {
		t.Fatal(err)
	}
	return h.fleet(resp.Msg.GetSecret())
}

// wantCode fails unless err is a Connect error with code.
func wantCode(t testing.TB, err error, code connect.Code, what string) *connect.Error {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != code {
		t.Fatalf("%s: got %v, want code %v", what, err, code)
	}
	return ce
}

// configStream is an open WatchConfig stream whose messages arrive on a channel.
type configStream struct {
	msgs   chan *fleetv1.WatchConfigResponse
	err    chan error
	cancel context.CancelFunc
}

func watch(t testing.TB, agent fleetv1connect.AgentServiceClient) *configStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := agent.WatchConfig(ctx, connect.NewRequest(&fleetv1.WatchConfigRequest{}))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	cs := &configStream{msgs: make(chan *fleetv1.WatchConfigResponse, 16), err: make(chan error, 1), cancel: cancel}
	go func() {
		for stream.Receive() {
			cs.msgs <- stream.Msg()
		}
		cs.err <- stream.Err()
		stream.Close()
	}()
	t.Cleanup(cancel)
	return cs
}

// next waits for the next configuration message.
func (cs *configStream) next(t testing.TB) *fleetv1.WatchConfigResponse {
	t.Helper()
	select {
	case m := <-cs.msgs:
		return m
	case err := <-cs.err:
		t.Fatalf("stream ended: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no configuration within 10s")
	}
	return nil
}

// eventually retries check until it returns nil or 10 s pass.
func eventually(t testing.TB, check func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
