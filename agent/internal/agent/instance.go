package agent

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/export"
	"kollect.dev/api/version"
)

// serviceAccountNamespace is where a pod reads its own namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// writerIdentity names this agent in the sinks' state: its version, and an instance identity
// that stays the same across restarts, upgrades and leader changes of one installation but
// differs between clusters (the kube-system namespace's UID is the cluster's identity) and
// between installations in one cluster (the agent's namespace).
func writerIdentity(ctx context.Context, cfg *rest.Config, o Options) (export.Writer, error) {
	ns := o.PodNamespace
	if ns == "" {
		ns = o.LeaderElectionNamespace
	}
	if ns == "" {
		ns = os.Getenv("POD_NAMESPACE")
	}
	if ns == "" {
		if raw, err := os.ReadFile(serviceAccountNamespace); err == nil {
			ns = strings.TrimSpace(string(raw))
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		return export.Writer{}, fmt.Errorf("identifying the agent: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	kubeSystem := &corev1.Namespace{}
	for {
		err := c.Get(ctx, client.ObjectKey{Name: metav1.NamespaceSystem}, kubeSystem)
		if err == nil {
			break
		}
		// A new API server creates kube-system a moment after it starts serving.
		if !apierrors.IsNotFound(err) || ctx.Err() != nil {
			return export.Writer{}, fmt.Errorf("identifying the agent by the UID of namespace %s (it needs get on namespaces): %w",
				metav1.NamespaceSystem, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	return export.Writer{Version: version.String(), Instance: ns + "@" + string(kubeSystem.UID)}, nil
}
