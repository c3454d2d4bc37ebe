package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// applyYAML creates every object of a multi-document YAML stream.
func applyYAML(ctx context.Context, cp *testenv.ControlPlane, doc []byte, namespace string) error {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(doc), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if len(u.Object) == 0 {
			continue
		}
		if namespace != "" && u.GetNamespace() == "" {
			u.SetNamespace(namespace)
		}
		if err := cp.Client.Create(ctx, u); err != nil {
			return fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
}

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

// waitSynced waits for the cluster inventory's Synced condition.
func waitSynced(ctx context.Context, cp *testenv.ControlPlane, key client.ObjectKey, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	inv := &kollectv1.KollectClusterInventory{}
	for {
		if err := cp.Client.Get(ctx, key, inv); err == nil {
			if c := apimeta.FindStatusCondition(inv.Status.Conditions, kollectv1.ConditionSynced); c != nil && c.Status == metav1.ConditionTrue {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("inventory %s not synced after %s: %+v", key.Name, timeout, inv.Status.Conditions)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// waitTargetsReady waits until every cluster target reports Ready, so what the demo prints
// is the settled state.
func waitTargetsReady(ctx context.Context, cp *testenv.ControlPlane, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var list kollectv1.KollectClusterTargetList
		ready := 0
		if err := cp.Client.List(ctx, &list); err == nil {
			for _, t := range list.Items {
				if apimeta.IsStatusConditionTrue(t.Status.Conditions, kollectv1.ConditionReady) {
					ready++
				}
			}
		}
		if ready > 0 && ready == len(list.Items) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d targets ready after %s", ready, len(list.Items), timeout)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func waitChecksumChange(ctx context.Context, cp *testenv.ControlPlane, key client.ObjectKey, old string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	inv := &kollectv1.KollectClusterInventory{}
	for time.Now().Before(deadline) {
		if err := cp.Client.Get(ctx, key, inv); err == nil && inv.Status.Checksum != old {
			if err := waitSynced(ctx, cp, key, timeout); err == nil {
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
	fmt.Println("$ git " + strings.Join(args, " "))
	if dir != "" {
		args = append([]string{"-C", dir}, args...)
	}
	cmd := exec.Command("git", args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}
