package charts

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"kollect.dev/testenv"
)

// scrapeSecureMetrics reads the agent's /metrics on port with curl as the chart's
// metrics.secure serves them: refused without a token (401) and with the token of a
// ServiceAccount the API server does not let get /metrics (403); served once that account is
// bound to the chart's metrics-reader ClusterRole. It returns the metrics.
func scrapeSecureMetrics(t *testing.T, cp *testenv.ControlPlane, kubectl string, objs []*unstructured.Unstructured, port int) string {
	t.Helper()
	reader := ""
	for _, o := range objs {
		if o.GetKind() == "ClusterRole" && strings.HasSuffix(o.GetName(), "-metrics-reader") {
			reader = o.GetName()
		}
	}
	if reader == "" {
		t.Fatal("the chart renders no metrics-reader ClusterRole")
	}
	kc := func(args ...string) string {
		t.Helper()
		out, err := run(root, kubectl, append([]string{"--kubeconfig", cp.Kubeconfig}, args...)...)
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(out)
	}
	kc("create", "serviceaccount", "scraper", "-n", namespace)
	token := kc("create", "token", "scraper", "-n", namespace)
	body := filepath.Join(t.TempDir(), "metrics")
	scrape := func(token string) string {
		args := []string{"-sk", "-o", body, "-w", "%{http_code}", fmt.Sprintf("https://127.0.0.1:%d/metrics", port)}
		if token != "" {
			args = append(args, "-H", "Authorization: Bearer "+token)
		}
		out, err := exec.Command("curl", args...).Output()
		if err != nil {
			t.Fatalf("curl: %v", err)
		}
		return string(out)
	}
	if code := scrape(""); code != "401" {
		t.Fatalf("/metrics without a token: %s, want 401", code)
	}
	if code := scrape(token); code != "403" {
		t.Fatalf("/metrics with an unbound ServiceAccount's token: %s, want 403", code)
	}
	kc("create", "clusterrolebinding", "scraper-metrics", "--clusterrole", reader, "--serviceaccount", namespace+":scraper")
	// RBAC reaches the authorizer through its informer: the binding is served within moments.
	deadline := time.Now().Add(30 * time.Second)
	for code := scrape(token); code != "200"; code = scrape(token) {
		if time.Now().After(deadline) {
			t.Fatalf("/metrics with a token bound to %s: %s, want 200", reader, code)
		}
		time.Sleep(200 * time.Millisecond)
	}
	b, err := os.ReadFile(body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
