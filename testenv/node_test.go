package testenv

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestNodeRunsHardenedDeployment starts a cluster with a real node and runs the hub image of
// `make images` as a Deployment with the charts' hardened security context: the scheduler
// places the pod, the kubelet starts it through containerd and runc and marks it Ready by its
// own HTTPS probe; the host reaches the pod's address, and `kubectl logs` reaches the kubelet
// through the API server.
func TestNodeRunsHardenedDeployment(t *testing.T) {
	images, err := Images()
	if err != nil {
		t.Fatal(err)
	}
	refs, err := ImageRefs(images)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	c, err := StartNodeCluster("nodetest", filepath.Join(images, "hub.tar"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster start to node Ready: %v", time.Since(began).Round(100*time.Millisecond))
	t.Cleanup(c.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	labels := map[string]string{"app": "hub"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "hub", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken: ptr.To(false),
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					Containers: []corev1.Container{{
						Name:            "hub",
						Image:           refs["hub"].Ref(),
						ImagePullPolicy: corev1.PullNever,
						Args:            []string{"--listen=:8443", "--data-dir=/data", "--hosts=localhost"},
						Ports:           []corev1.ContainerPort{{Name: "https", ContainerPort: 8443}},
						ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
							HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("https"), Scheme: corev1.URISchemeHTTPS}}},
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
						VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
					}},
					Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
				},
			},
		},
	}
	began = time.Now()
	if err := c.Client.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	pod := waitPodReady(ctx, t, c, "default", "app=hub")
	t.Logf("Deployment created to pod Ready: %v", time.Since(began).Round(100*time.Millisecond))
	if pod.Spec.NodeName != c.NodeName {
		t.Errorf("pod on node %q, want %q", pod.Spec.NodeName, c.NodeName)
	}
	if !strings.HasPrefix(pod.Status.PodIP, "198.19.") {
		t.Errorf("pod IP %q is not in the node's pod range", pod.Status.PodIP)
	}
	// The host reaches the pod through the node's namespace.
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := hc.Get(fmt.Sprintf("https://%s:8443/healthz", pod.Status.PodIP))
	if err != nil {
		t.Fatalf("GET the pod's /healthz from the host: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("pod /healthz: %s", resp.Status)
	}
	// kubectl (not this project's code) reads the container's log through the API server and
	// the kubelet's authenticated port.
	assets, err := AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(assets, "kubectl"), "--kubeconfig", c.Kubeconfig, "logs", "-n", "default", "deployment/hub").CombinedOutput()
	if err != nil || len(out) == 0 {
		t.Fatalf("kubectl logs: %v\n%s", err, out)
	}
}

// waitPodReady waits for the one pod matching selector to be Ready and returns it.
func waitPodReady(ctx context.Context, t *testing.T, c *NodeCluster, ns, selector string) corev1.Pod {
	t.Helper()
	sel, err := metav1.ParseToLabelSelector(selector)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatal(err)
	}
	var last string
	for {
		var pods corev1.PodList
		if err := c.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: ls}); err == nil {
			for _, p := range pods.Items {
				last = fmt.Sprintf("%s phase %s, conditions %+v, statuses %+v", p.Name, p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses)
				for _, cond := range p.Status.Conditions {
					if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
						return p
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no Ready pod %s in %s: %s\nkubelet log (tail):\n%s", selector, ns, last, tail(c.ComponentLog("kubelet"), 40))
		case <-time.After(250 * time.Millisecond):
		}
	}
}
