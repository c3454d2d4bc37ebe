package dashboard

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"

	"kollect.dev/testenv"
)

// root is the repository root, from this package's directory.
const root = "../.."

// tools are the programs the test needs; TestMain fails without them (make test installs
// them: hack/ensure-browser.sh).
var tools struct{ node, npm, chromium, hub string }

func TestMain(m *testing.M) {
	code, err := setup()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e/dashboard:", err)
		os.Exit(1)
	}
	os.Exit(code(m))
}

func setup() (func(*testing.M) int, error) {
	var err error
	if tools.node, err = exec.LookPath("node"); err != nil {
		return nil, fmt.Errorf("node is required (make test installs it with hack/ensure-browser.sh): %w", err)
	}
	if tools.npm, err = exec.LookPath("npm"); err != nil {
		return nil, fmt.Errorf("npm is required: %w", err)
	}
	tools.chromium = os.Getenv("KOLLECT_CHROMIUM")
	if tools.chromium == "" {
		if tools.chromium, err = exec.LookPath("chromium"); err != nil {
			return nil, fmt.Errorf("chromium is required (make test installs Debian's chromium with hack/ensure-browser.sh): %w", err)
		}
	}
	// The dashboard is built first so that the hub binary embeds it.
	if stale(filepath.Join(root, "web", "node_modules", ".package-lock.json"), filepath.Join(root, "web", "package-lock.json")) {
		if err := run(filepath.Join(root, "web"), tools.npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"); err != nil {
			return nil, err
		}
	}
	// make test builds the dashboard (make web) before any package compiles the hub; rebuilding
	// it here then would empty the embedded directory under the feet of parallel go builds.
	if built, err := dashboardFresh(); err != nil {
		return nil, err
	} else if !built {
		if err := run(filepath.Join(root, "web"), tools.npm, "run", "--silent", "build"); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "kollect-dashboard-bin-")
	if err != nil {
		return nil, err
	}
	built, err := testenv.BuildCommands(dir, "", "./hub/cmd/kollect-hub")
	if err != nil {
		return nil, err
	}
	tools.hub = built[0]
	return func(m *testing.M) int {
		defer os.RemoveAll(dir)
		return m.Run()
	}, nil
}

// dashboardFresh reports whether the built dashboard (hub/internal/webui/dist/index.html) is
// newer than every source file of web/.
func dashboardFresh() (bool, error) {
	built, err := os.Stat(filepath.Join(root, "hub", "internal", "webui", "dist", "index.html"))
	if err != nil {
		return false, nil
	}
	newer := false
	web := filepath.Join(root, "web")
	for _, p := range []string{"src", "public", "index.html", "vite.config.ts", "tsconfig.json", "package.json", "package-lock.json", "scripts"} {
		err := filepath.WalkDir(filepath.Join(web, p), func(_ string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if info, err := d.Info(); err == nil && info.ModTime().After(built.ModTime()) {
				newer = true
			}
			return nil
		})
		if err != nil {
			return false, fmt.Errorf("checking whether the dashboard is built: %w", err)
		}
	}
	return !newer, nil
}

// stale reports whether installed is missing or older than lock (npm ci is then due).
func stale(installed, lock string) bool {
	i, err := os.Stat(installed)
	if err != nil {
		return true
	}
	l, err := os.Stat(lock)
	return err != nil || l.ModTime().After(i.ModTime())
}

func run(dir, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s (in %s): %w", name, strings.Join(args, " "), dir, err)
	}
	return nil
}

// hub is a running kollect-hub process with its own CA.
type hub struct {
	url, dir, addr string
	adminToken     string
	caPEM          []byte
	log            *os.File

	mu  sync.Mutex
	cmd *exec.Cmd
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func startHub(t *testing.T) *hub {
	t.Helper()
	dir := t.TempDir()
	h := &hub{dir: dir, addr: freeAddr(t)}
	h.url = "https://" + strings.Replace(h.addr, "127.0.0.1", "localhost", 1)
	logPath := filepath.Join(dir, "hub.log")
	var err error
	if h.log, err = os.Create(logPath); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.stop()
		h.log.Close()
		if t.Failed() {
			raw, _ := os.ReadFile(logPath)
			t.Logf("hub log:\n%s", raw)
		}
	})
	if err := h.start(); err != nil {
		t.Fatal(err)
	}
	tok, err := os.ReadFile(filepath.Join(dir, "data", "admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	h.adminToken = strings.TrimSpace(string(tok))
	if h.caPEM, err = os.ReadFile(filepath.Join(dir, "data", "pki", "ca.crt")); err != nil {
		t.Fatal(err)
	}
	return h
}

// staleAfter is the hub's --stale-after.
const staleAfter = 4 * time.Second

// start runs the hub on its address and data directory and waits until it accepts connections.
func (h *hub) start() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cmd = exec.Command(tools.hub, "--listen", h.addr, "--data-dir", filepath.Join(h.dir, "data"),
		"--heartbeat-interval", "1s", "--stale-after", staleAfter.String(), "--offline-after", "10s", "--poll-interval", "500ms",
		"--register-burst", "0") // every simulated agent registers from 127.0.0.1
	h.cmd.Stdout, h.cmd.Stderr = h.log, h.log
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := h.cmd.Start(); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", h.addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("hub did not start on %s (see %s)", h.addr, h.log.Name())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (h *hub) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cmd != nil {
		_ = h.cmd.Process.Signal(syscall.SIGTERM)
		_ = h.cmd.Wait()
		h.cmd = nil
	}
}

// restartHandler lets the browser test restart the hub (POST), to watch the dashboard reconnect.
func (h *hub) restartHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		h.stop()
		// Stay down long enough for the dashboard to notice and show it, and for every cluster
		// to turn stale: the first heartbeat after the restart ends a silence, which its
		// history records (the cluster pages' history tests count on those records; item
		// counts alone are recorded once a minute). Down for 2 s, a cluster's heartbeats were
		// 3-4 s apart and sometimes recorded nothing.
		time.Sleep(staleAfter + time.Second)
		if err := h.start(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// httpClient trusts the hub's CA.
func (h *hub) httpClient() *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(h.caPEM)
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
}

// fleet is a FleetService client acting with token.
func (h *hub) fleet(token string) fleetv1connect.FleetServiceClient {
	auth := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+token)
			return next(ctx, req)
		}
	})
	return fleetv1connect.NewFleetServiceClient(h.httpClient(), h.url, connect.WithInterceptors(auth))
}
