// Command kollect-demo is what `make demo` runs: a local control plane with the Kollect CRDs
// and the documented examples applied, listed as `kubectl get kollect` shows them.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"kollect.dev/e2e/testenv"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	fmt.Println("» starting a local control plane (etcd + kube-apiserver) with the Kollect CRDs")
	cp, err := testenv.Start("demo", testenv.Options{})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("» stopping the control plane")
		_ = cp.Stop()
	}()

	for _, ns := range []string{"demo", "kollect-system"} {
		if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return err
		}
	}
	files, _ := filepath.Glob("docs/examples/*.yaml")
	fmt.Printf("» applying %d example files from docs/examples\n", len(files))
	for _, file := range files {
		if err := applyFile(ctx, cp, file); err != nil {
			return err
		}
	}
	assets, err := testenv.AssetsDir()
	if err != nil {
		return err
	}
	kubectl := exec.CommandContext(ctx, filepath.Join(assets, "kubectl"), "--kubeconfig", cp.Kubeconfig, "get", "kollect", "-A")
	kubectl.Stdout, kubectl.Stderr = os.Stdout, os.Stderr
	fmt.Println("» kubectl get kollect -A")
	if err := kubectl.Run(); err != nil {
		return err
	}
	fmt.Printf("\nkubeconfig: %s\nPress Ctrl-C to stop.\n", cp.Kubeconfig)
	if os.Getenv("KOLLECT_DEMO_EXIT") != "" {
		return nil
	}
	<-ctx.Done()
	return nil
}

func applyFile(ctx context.Context, cp *testenv.ControlPlane, file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("%s: %w", file, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if u.GetNamespace() == "" && !strings.Contains(u.GetKind(), "Cluster") {
			u.SetNamespace("demo")
		}
		if err := cp.Client.Create(ctx, u); err != nil {
			return fmt.Errorf("%s: %s %s: %w", file, u.GetKind(), u.GetName(), err)
		}
	}
}
