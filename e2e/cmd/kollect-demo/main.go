// Command kollect-demo is what `make demo` runs: a local control plane with sample workloads
// in several namespaces (Deployments, Services, ConfigMaps, a CRD and its objects), the
// kollect-agent binary watching it, and a cluster inventory exported to a local git
// repository. It shows the exported rows, changes a workload, shows the one-row commit that
// follows, and runs until Ctrl-C, leaving nothing behind.
package main

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
	"kollect.dev/e2e/testenv"
)

//go:embed workloads.yaml
var workloads []byte

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func step(format string, args ...any) { fmt.Printf("\n\033[1m» "+format+"\033[0m\n", args...) }

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	agentBin := os.Getenv("KOLLECT_AGENT_BIN")
	if agentBin == "" {
		agentBin = "bin/kollect-agent"
	}
	agentBin, err := filepath.Abs(agentBin)
	if err != nil {
		return err
	}
	if _, err := os.Stat(agentBin); err != nil {
		return fmt.Errorf("%s is missing: run `make demo` (it builds it)", agentBin)
	}
	work, err := os.MkdirTemp("", "kollect-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	step("starting a local control plane (etcd + kube-apiserver) with the Kollect CRDs")
	cp, err := testenv.Start("demo", testenv.Options{})
	if err != nil {
		return err
	}
	defer func() {
		step("stopping the control plane")
		_ = cp.Stop()
	}()

	step("creating sample workloads in namespaces shop and payments, and a Database CRD")
	if err := applyYAML(ctx, cp, workloads, ""); err != nil {
		return err
	}
	repo, err := testenv.InitBareRepo(filepath.Join(work, "inventory.git"))
	if err != nil {
		return err
	}
	config, err := os.ReadFile("docs/examples/demo.yaml")
	if err != nil {
		return err
	}
	config = []byte(strings.ReplaceAll(string(config), "file:///tmp/kollect-demo.git", "file://"+repo))
	if err := waitForKind(ctx, cp, "demo.kollect.dev/v1", "DatabaseList"); err != nil {
		return err
	}
	step("applying docs/examples/demo.yaml: profiles, cluster targets, a git sink and the inventory \"fleet\"")
	if err := applyYAML(ctx, cp, config, ""); err != nil {
		return err
	}

	step("starting bin/kollect-agent --cluster-name demo")
	agent := exec.Command(agentBin, "--cluster-name", "demo", "--metrics-bind-address", "0", "--health-probe-bind-address", "0",
		"--cache-dir", filepath.Join(work, "cache"))
	agent.Env = append(os.Environ(), "KUBECONFIG="+cp.Kubeconfig)
	logFile, err := os.Create(filepath.Join(work, "agent.log"))
	if err != nil {
		return err
	}
	agent.Stdout, agent.Stderr = logFile, logFile
	agent.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := agent.Start(); err != nil {
		return err
	}
	defer func() {
		step("stopping the agent")
		_ = agent.Process.Signal(syscall.SIGTERM)
		_ = agent.Wait()
	}()

	inv := &kollectv1.KollectClusterInventory{ObjectMeta: metav1.ObjectMeta{Name: "fleet"}}
	if err := waitSynced(ctx, cp, inv, 90*time.Second); err != nil {
		tail, _ := os.ReadFile(logFile.Name())
		return fmt.Errorf("%w\nagent log:\n%s", err, lastLines(string(tail), 30))
	}
	kubectl(ctx, cp, "get", "kollect", "-A")
	step("the repository now holds one document per kind (layout byKind):")
	clone := filepath.Join(work, "clone")
	if err := git("", "clone", "-q", repo, clone); err != nil {
		return err
	}
	_ = git(clone, "ls-files")
	_ = git(clone, "--no-pager", "show", "HEAD:demo/fleet/Deployment.yaml")

	step("scaling shop/cart to 5 replicas: the next commit changes exactly that row")
	d := &appsv1.Deployment{}
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "cart"}, d); err != nil {
		return err
	}
	before := inv.Status.Checksum
	d.Spec.Replicas = ptr(int32(5))
	if err := cp.Client.Update(ctx, d); err != nil {
		return err
	}
	if err := waitChecksumChange(ctx, cp, inv, before, 60*time.Second); err != nil {
		return err
	}
	_ = git(clone, "pull", "-q")
	_ = git(clone, "--no-pager", "log", "-1", "-p", "--stat")

	fmt.Printf("\nkubeconfig: %s\nagent log:  %s\n", cp.Kubeconfig, logFile.Name())
	if os.Getenv("KOLLECT_DEMO_EXIT") != "" {
		return nil
	}
	fmt.Println("The agent keeps exporting; edit workloads with kubectl and watch the repository. Press Ctrl-C to stop.")
	<-ctx.Done()
	return nil
}

func ptr[T any](v T) *T { return &v }

func waitForKind(ctx context.Context, cp *testenv.ControlPlane, apiVersion, listKind string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		l := &unstructured.UnstructuredList{}
		l.SetAPIVersion(apiVersion)
		l.SetKind(listKind)
		if err := cp.Client.List(ctx, l); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("%s not served: %w", apiVersion, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func waitSynced(ctx context.Context, cp *testenv.ControlPlane, inv *kollectv1.KollectClusterInventory, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(inv), inv); err == nil {
			if c := apimeta.FindStatusCondition(inv.Status.Conditions, kollectv1.ConditionSynced); c != nil && c.Status == metav1.ConditionTrue {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("inventory fleet not synced after %s: %+v", timeout, inv.Status.Conditions)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func waitChecksumChange(ctx context.Context, cp *testenv.ControlPlane, inv *kollectv1.KollectClusterInventory, old string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(inv), inv); err == nil && inv.Status.Checksum != old {
			if err := waitSynced(ctx, cp, inv, timeout); err == nil {
				return nil
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	return errors.New("the change was not exported in time")
}

func kubectl(ctx context.Context, cp *testenv.ControlPlane, args ...string) {
	assets, err := testenv.AssetsDir()
	if err != nil {
		return
	}
	fmt.Println("$ kubectl " + strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, filepath.Join(assets, "kubectl"), append([]string{"--kubeconfig", cp.Kubeconfig}, args...)...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	_ = cmd.Run()
}

func git(dir string, args ...string) error {
	if dir != "" {
		args = append([]string{"-C", dir}, args...)
	}
	fmt.Println("$ git " + strings.Join(args[min(2, len(args)):], " "))
	cmd := exec.Command("git", args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
