package fleet

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"
	"google.golang.org/protobuf/types/known/durationpb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"
	"kollect.dev/testenv"
)

// bins holds the binaries built once for the package, stamped as `make build` stamps them,
// and an agent stamped with olderAgentVersion for the version-skew view.
var bins struct{ hub, agent, olderAgent, kollect, version string }

// olderAgentVersion is the version of bins.olderAgent.
const olderAgentVersion = "v0.0.9-e2e-older"

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kollect-fleet-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	built, err := testenv.BuildCommands(dir, "", "./hub/cmd/kollect-hub", "./agent/cmd/kollect-agent", "./agent/cmd/kollect")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins.hub, bins.agent, bins.kollect = built[0], built[1], built[2]
	older, err := testenv.BuildCommands(filepath.Join(dir, "older"), olderAgentVersion, "./agent/cmd/kollect-agent")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins.olderAgent = older[0]
	if bins.version, err = testenv.Version(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// hub is a running kollect-hub process.
type hub struct {
	t           *testing.T
	dir, addr   string
	fingerprint string
	adminToken  string
	args        []string // flags beyond the harness's own
	// replica: a hub on a PostgreSQL store (--store in args), maybe one of several: its data
	// directory holds no database and, but on the first replica, no admin token (adminToken
	// is then the first one's).
	replica bool
	// caPEM is the CA of the hub's certificate: set beforehand when it is brought (--tls-cert
	// in args), read from the data directory otherwise.
	caPEM []byte
	cmd   *exec.Cmd
}

func startHub(t *testing.T, dir, addr string) *hub {
	t.Helper()
	h := &hub{t: t, dir: dir, addr: addr}
	h.start()
	t.Cleanup(h.stop)
	return h
}

// startHubWithToken starts a hub on a free loopback port and returns it, an admin client and
// a bootstrap token for uses registrations.
func startHubWithToken(t *testing.T, dir string, uses int64) (*hub, fleetv1connect.FleetServiceClient, string) {
	t.Helper()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	h := startHub(t, dir, fmt.Sprintf("127.0.0.1:%d", port))
	admin := h.fleet(h.adminToken)
	tok, err := admin.CreateBootstrapToken(context.Background(), connect.NewRequest(&fleetv1.CreateBootstrapTokenRequest{
		Description: "e2e", Ttl: durationpb.New(time.Hour), MaxUses: uses}))
	if err != nil {
		t.Fatal(err)
	}
	return h, admin, tok.Msg.GetSecret()
}

func (h *hub) start() {
	h.t.Helper()
	log, err := os.OpenFile(filepath.Join(h.dir, "hub.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		h.t.Fatal(err)
	}
	h.cmd = exec.Command(bins.hub, "--listen", h.addr, "--data-dir", filepath.Join(h.dir, "data"),
		"--heartbeat-interval", "1s", "--stale-after", "5s", "--offline-after", "20s", "--poll-interval", "500ms")
	h.cmd.Args = append(h.cmd.Args, h.args...)
	h.cmd.Stdout, h.cmd.Stderr = log, log
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := h.cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", h.addr, time.Second); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			raw, _ := os.ReadFile(filepath.Join(h.dir, "hub.log"))
			h.t.Fatalf("hub did not start:\n%s", raw)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if h.caPEM == nil {
		if h.caPEM, err = os.ReadFile(filepath.Join(h.dir, "data", "pki", "ca.crt")); err != nil {
			h.t.Fatal(err)
		}
	}
	block, _ := pem.Decode(h.caPEM)
	sum := sha256.Sum256(block.Bytes)
	h.fingerprint = "sha256:" + hex.EncodeToString(sum[:])
	tok, err := os.ReadFile(filepath.Join(h.dir, "data", "admin-token"))
	switch {
	case err == nil:
		h.adminToken = strings.TrimSpace(string(tok))
	case !h.replica || h.adminToken == "":
		h.t.Fatalf("no admin token: %v", err)
	}
	h.checkPrivate()
}

// checkPrivate: the shipped hub never writes its admin token to its log, and the files that
// hold secrets or their hashes (the token, the CA key, the SQLite store and its WAL) are
// readable by the hub's user only.
func (h *hub) checkPrivate() {
	h.t.Helper()
	raw, _ := os.ReadFile(filepath.Join(h.dir, "hub.log"))
	if strings.Contains(string(raw), h.adminToken) {
		h.t.Errorf("the hub's log shows its admin token")
	}
	data := filepath.Join(h.dir, "data")
	for _, name := range []string{"admin-token", "pki/ca.key", "hub.db", "hub.db-wal", "hub.db-shm"} {
		fi, err := os.Stat(filepath.Join(data, name))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) && (strings.HasPrefix(name, "hub.db-") || h.replica) {
				continue // the WAL and shared-memory files come and go; a replica has none of these
			}
			h.t.Errorf("%s: %v", name, err)
			continue
		}
		if fi.Mode().Perm()&0o077 != 0 {
			h.t.Errorf("%s is %v: readable beyond the hub's user", name, fi.Mode().Perm())
		}
	}
}

func (h *hub) stop() {
	if h.cmd != nil && h.cmd.Process != nil {
		_ = h.cmd.Process.Signal(syscall.SIGTERM)
		_ = h.cmd.Wait()
		h.cmd = nil
	}
	if h.t.Failed() {
		// The log outlives the test's temporary directory, as the agents' logs do.
		raw, _ := os.ReadFile(filepath.Join(h.dir, "hub.log"))
		keep := filepath.Join(os.TempDir(), "kollect-fleet-hub-"+strings.ReplaceAll(h.addr, ":", "-")+".log")
		if os.WriteFile(keep, raw, 0o644) == nil {
			h.t.Logf("hub %s log kept in %s", h.addr, keep)
		}
	}
}

// kill ends the hub process with SIGKILL, as a crashed node or the OOM killer would.
func (h *hub) kill() {
	if h.cmd != nil && h.cmd.Process != nil {
		_ = h.cmd.Process.Kill()
		_ = h.cmd.Wait()
		h.cmd = nil
	}
}

// url is the hub's URL as agents dial it.
func (h *hub) url() string { return "https://" + h.addr }

// fleet returns a FleetService client acting with token.
func (h *hub) fleet(token string) fleetv1connect.FleetServiceClient {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(h.caPEM)
	host, _, _ := net.SplitHostPort(h.addr)
	hc := &http.Client{Transport: &http2.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: host}}}
	auth := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+token)
			return next(ctx, req)
		}
	})
	return fleetv1connect.NewFleetServiceClient(hc, "https://"+h.addr, connect.WithInterceptors(auth))
}

// agent is a kollect-agent process for one control plane; stop and start simulate an agent
// that goes away and comes back (its credential stays in the cluster's Secret).
type agent struct {
	t        *testing.T
	cp       *testenv.ControlPlane
	h        *hub
	labels   string
	urls     string // --hub-url; the hub's own URL when empty
	cacheDir string
	bin      string   // bins.agent unless the test chose another build
	args     []string // flags beyond the harness's own
	cmd      *exec.Cmd
	log      string
}

func startAgent(t *testing.T, cp *testenv.ControlPlane, h *hub, token string, labels string) *agent {
	t.Helper()
	return startAgentBinary(t, bins.agent, cp, h, token, labels)
}

// startAgentBinary is startAgent with a chosen build of kollect-agent.
func startAgentBinary(t *testing.T, bin string, cp *testenv.ControlPlane, h *hub, token string, labels string, args ...string) *agent {
	t.Helper()
	return startAgentURLs(t, bin, cp, h, "", token, labels, args...)
}

// startAgentURLs is startAgentBinary with --hub-url urls (h's URL when empty); h still gives
// the CA the agent pins.
func startAgentURLs(t *testing.T, bin string, cp *testenv.ControlPlane, h *hub, urls, token string, labels string, args ...string) *agent {
	t.Helper()
	ctx := context.Background()
	// The agent's own namespace holds its hub Secrets; bundles land in kollect-fleet, as with
	// the chart's default hub.namespaces.
	_ = cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kollect-system"}})
	_ = cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kollect-fleet"}})
	_ = cp.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kollect-system", Name: "kollect-hub-bootstrap"},
		StringData: map[string]string{"token": token}})
	a := &agent{t: t, cp: cp, h: h, labels: labels, urls: urls, bin: bin, args: args, cacheDir: t.TempDir(), log: filepath.Join(t.TempDir(), "agent.log")}
	a.start()
	t.Cleanup(func() {
		if a.cmd == nil {
			return
		}
		if t.Failed() {
			// A goroutine dump shows where a stuck agent waits; keep the whole log.
			_ = a.cmd.Process.Signal(syscall.SIGQUIT)
			_ = a.cmd.Wait()
			raw, _ := os.ReadFile(a.log)
			keep := filepath.Join(os.TempDir(), "kollect-fleet-"+cp.Name+".log")
			_ = os.WriteFile(keep, raw, 0o644)
			t.Logf("agent %s log (tail, full log with goroutine dump in %s):\n%s", cp.Name, keep, tail(string(raw), 20))
			return
		}
		a.stop()
	})
	return a
}

// start runs the agent process, appending to its log.
func (a *agent) start() {
	a.t.Helper()
	logFile, err := os.OpenFile(a.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		a.t.Fatal(err)
	}
	urls := a.urls
	if urls == "" {
		urls = a.h.url()
	}
	a.cmd = exec.Command(a.bin, "--cluster-name", a.cp.Name, "--cluster-labels", a.labels,
		"--hub-url", urls, "--hub-ca-fingerprint", a.h.fingerprint, "--pod-namespace", "kollect-system",
		"--hub-namespaces", "kollect-fleet", "--metrics-bind-address", "0", "--health-probe-bind-address", "0",
		"--cache-dir", a.cacheDir, "--allow-local-sinks")
	a.cmd.Args = append(a.cmd.Args, a.args...)
	a.cmd.Env = append(os.Environ(), "KUBECONFIG="+a.cp.Kubeconfig)
	a.cmd.Stdout, a.cmd.Stderr = logFile, logFile
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := a.cmd.Start(); err != nil {
		a.t.Fatal(err)
	}
}

// stop ends the agent process (SIGTERM) and waits for it.
func (a *agent) stop() {
	if a.cmd != nil && a.cmd.Process != nil {
		_ = a.cmd.Process.Signal(syscall.SIGTERM)
		_ = a.cmd.Wait()
	}
	a.cmd = nil
}

// kollectCLI returns a runner of the kollect binary with its hub login kept in config; it
// returns the combined output and the exit code.
func kollectCLI(t *testing.T, config string) func(args ...string) (string, int) {
	return func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(bins.kollect, args...)
		cmd.Env = append(os.Environ(), "KOLLECT_HUB_CONFIG="+config)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, last)
}
