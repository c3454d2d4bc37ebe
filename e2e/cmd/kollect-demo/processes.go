package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
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

type binaries struct{ hub, agent string }

// findBinaries locates bin/kollect-hub and bin/kollect-agent (make demo builds them), or the
// paths in KOLLECT_HUB_BIN and KOLLECT_AGENT_BIN.
func findBinaries() (binaries, error) {
	var b binaries
	for _, x := range []struct {
		dst       *string
		env, dflt string
	}{{&b.hub, "KOLLECT_HUB_BIN", "bin/kollect-hub"}, {&b.agent, "KOLLECT_AGENT_BIN", "bin/kollect-agent"}} {
		p := os.Getenv(x.env)
		if p == "" {
			p = x.dflt
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return b, err
		}
		if _, err := os.Stat(abs); err != nil {
			return b, fmt.Errorf("%s is missing: run `make demo` (it builds it)", abs)
		}
		*x.dst = abs
	}
	return b, nil
}

// process is a child process whose output goes to a log file.
type process struct {
	cmd *exec.Cmd
	log string
}

func startProcess(bin string, args, env []string, log string) (*process, error) {
	f, err := os.Create(log)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &process{cmd: cmd, log: log}, nil
}

func (p *process) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	_ = p.cmd.Wait()
}

type hubProcess struct {
	*process
	addr, fingerprint, adminToken string
	fleet                         fleetv1connect.FleetServiceClient
}

func startHub(ctx context.Context, bin, work string) (*hubProcess, error) {
	port, err := testenv.FreePort()
	if err != nil {
		return nil, err
	}
	data := filepath.Join(work, "hub")
	h := &hubProcess{addr: fmt.Sprintf("127.0.0.1:%d", port)}
	h.process, err = startProcess(bin, []string{"--listen", h.addr, "--data-dir", data, "--heartbeat-interval", "2s"}, nil,
		filepath.Join(work, "hub.log"))
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", h.addr, time.Second); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			h.stop()
			return nil, fmt.Errorf("the hub did not start; see %s", h.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	fp, err1 := os.ReadFile(filepath.Join(data, "ca-fingerprint"))
	tok, err2 := os.ReadFile(filepath.Join(data, "admin-token"))
	caPEM, err3 := os.ReadFile(filepath.Join(data, "pki", "ca.crt"))
	if err1 != nil || err2 != nil || err3 != nil {
		h.stop()
		return nil, fmt.Errorf("reading the hub's data directory: %v %v %v", err1, err2, err3)
	}
	h.fingerprint, h.adminToken = strings.TrimSpace(string(fp)), strings.TrimSpace(string(tok))
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	hc := &http.Client{Transport: &http2.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}}}
	token := h.adminToken
	auth := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+token)
			return next(ctx, req)
		}
	})
	h.fleet = fleetv1connect.NewFleetServiceClient(hc, "https://"+h.addr, connect.WithInterceptors(auth))
	return h, nil
}

func (h *hubProcess) bootstrapToken(ctx context.Context, uses int64) (string, error) {
	resp, err := h.fleet.CreateBootstrapToken(ctx, connect.NewRequest(&fleetv1.CreateBootstrapTokenRequest{
		Description: "make demo", Ttl: durationpb.New(time.Hour), MaxUses: uses}))
	if err != nil {
		return "", fmt.Errorf("creating a bootstrap token: %w", err)
	}
	return resp.Msg.GetSecret(), nil
}

// waitClusters waits until n clusters have registered and sent a heartbeat.
func (h *hubProcess) waitClusters(ctx context.Context, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		resp, err := h.fleet.ListClusters(ctx, connect.NewRequest(&fleetv1.ListClustersRequest{}))
		online := 0
		if err == nil {
			for _, c := range resp.Msg.GetClusters() {
				if c.GetState() == fleetv1.ClusterState_CLUSTER_STATE_ONLINE {
					online++
				}
			}
		}
		if online >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d clusters online after %s (agent logs are next to %s)", online, n, timeout, h.log)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func (h *hubProcess) applyBundle(ctx context.Context, name, manifests string, selector map[string]string) error {
	resp, err := h.fleet.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{Name: name, Manifests: manifests,
		ClusterSelector: &fleetv1.LabelSelector{MatchLabels: selector}, Message: "make demo"}))
	if err != nil {
		return fmt.Errorf("applying bundle %s: %w", name, err)
	}
	fmt.Printf("bundle %s revision %d goes to: %s\n", name, resp.Msg.GetRevision().GetRevision(), strings.Join(resp.Msg.GetSelectedClusters(), ", "))
	return nil
}

func (h *hubProcess) printClusters(ctx context.Context) error {
	resp, err := h.fleet.ListClusters(ctx, connect.NewRequest(&fleetv1.ListClustersRequest{}))
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "CLUSTER\tSTATE\tKUBERNETES\tLABELS\tCONFIG IN SYNC")
	for _, c := range resp.Msg.GetClusters() {
		var labels []string
		for k, v := range c.GetLabels() {
			labels = append(labels, k+"="+v)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%v\n", c.GetName(), strings.TrimPrefix(c.GetState().String(), "CLUSTER_STATE_"),
			c.GetKubernetesVersion(), strings.Join(labels, ","), c.GetConfigInSync())
	}
	return w.Flush()
}

// startAgent runs kollect-agent for one control plane, registered to the hub.
func startAgent(ctx context.Context, bin string, cp *testenv.ControlPlane, hub *hubProcess, token, work string) (*process, error) {
	if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kollect-system"}}); err != nil {
		return nil, err
	}
	if err := cp.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kollect-system", Name: "kollect-hub-bootstrap"},
		StringData: map[string]string{"token": token}}); err != nil {
		return nil, err
	}
	return startProcess(bin, []string{"--cluster-name", cp.Name, "--cluster-labels", "env=demo,region=" + cp.Name,
		"--hub-url", "https://" + hub.addr, "--hub-ca-fingerprint", hub.fingerprint, "--pod-namespace", "kollect-system",
		"--hub-namespaces", "kollect-demo", "--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--cache-dir", filepath.Join(work, "cache-"+cp.Name), "--allow-local-sinks"},
		[]string{"KUBECONFIG=" + cp.Kubeconfig}, filepath.Join(work, "agent-"+cp.Name+".log"))
}
