package fleet

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/testenv"
)

// previewExample is the bundle docs/previews.md previews.
const previewExample = "../../docs/examples/preview-bundle.yaml"

// previewWritten are the resources a preview must never write: the bundle's kinds, and the
// Deployments it reads.
var previewWritten = []string{"kollectprofiles", "kollectclustertargets", "kollectclusterinventories",
	"kollectdatabasesinks", "deployments"}

// TestBundlePreview previews docs/examples/preview-bundle.yaml with the shipped `kollect hub
// bundle preview` on the two ring=canary clusters of a fleet of three, each running the shipped
// kollect-agent (one with --preview-samples). Every canary answers within the call: its
// Deployments listed and matched, the two without a memory limit named as extraction errors of
// memoryLimit, the distinct images and teams, the export's size (checked against what `kollect
// collect` prints for the same file), Certificates not served; sample rows only from the agent
// that opted in. The stable cluster is not asked. The kube-apiserver's own write counters show
// that no cluster wrote a Kollect object or a Deployment meanwhile, and curl reads the preview
// back from the hub's Connect endpoint.
func TestBundlePreview(t *testing.T) {
	t.Parallel() // its own control planes, hub and ports: it waits alongside the others
	ctx := context.Background()
	work := t.TempDir()
	h, admin, token := startHubWithToken(t, work, 3)
	cps, err := testenv.StartN("preview", 3, testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testenv.StopAll(cps) })
	canaries, stable := cps[:2], cps[2]
	for _, cp := range canaries {
		seedPreviewDeployments(t, cp)
	}
	startAgentBinary(t, bins.agent, canaries[0], h, token, "ring=canary", "--preview-samples")
	startAgentBinary(t, bins.agent, canaries[1], h, token, "ring=canary")
	startAgentBinary(t, bins.agent, stable, h, token, "ring=stable")
	for _, cp := range cps {
		eventually(t, 60*time.Second, cp.Name+" online", func() (bool, string) {
			c, err := admin.GetCluster(ctx, connect.NewRequest(&fleetv1.GetClusterRequest{Name: cp.Name}))
			if err != nil {
				return false, err.Error()
			}
			return c.Msg.GetCluster().GetState() == fleetv1.ClusterState_CLUSTER_STATE_ONLINE, c.Msg.GetCluster().GetState().String()
		})
	}

	config := filepath.Join(work, "hub.json")
	kollect := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(bins.kollect, args...)
		cmd.Env = append(os.Environ(), "KOLLECT_HUB_CONFIG="+config)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != 0 && code != 1 {
			t.Fatalf("kollect %s: exit %d:\n%s%s", strings.Join(args, " "), code, stdout.String(), stderr.String())
		}
		return stdout.String(), code
	}
	if out, code := kollect("hub", "login", "--url", h.url(), "--token", h.adminToken, "--ca-fingerprint", h.fingerprint); code != 0 {
		t.Fatalf("login: exit %d:\n%s", code, out)
	}

	before := previewWrites(t, cps)
	start := time.Now()
	out, code := kollect("hub", "bundle", "preview", "-f", previewExample, "--selector", "ring=canary", "--samples", "2", "-o", "json")
	took := time.Since(start)
	if code != 1 {
		t.Errorf("a preview that finds extraction errors and a kind not served: exit %d, want 1 (findings)", code)
	}
	var got fleetv1.PreviewBundleResponse
	if err := protojson.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("kollect hub bundle preview -o json: %v:\n%s", err, out)
	}
	t.Logf("preview %s on 2 canaries answered in %s (CLI wall time)", got.GetPreviewId(), took.Round(time.Millisecond))
	if len(got.GetPending()) != 0 || len(got.GetNotConnected()) != 0 {
		t.Errorf("pending %v, not connected %v: every canary is online", got.GetPending(), got.GetNotConnected())
	}
	var answered []string
	for _, r := range got.GetResults() {
		answered = append(answered, r.GetCluster())
	}
	if want := []string{canaries[0].Name, canaries[1].Name}; !slices.Equal(answered, want) {
		t.Fatalf("answers from %v, want the canaries %v (and never %s)", answered, want, stable.Name)
	}
	for i, r := range got.GetResults() {
		checkPreviewResult(t, r, i == 0)
	}
	checkEstimatedBytes(t, canaries[0], got.GetResults()[0])

	// The table a person reads names what matters.
	table, _ := kollect("hub", "bundle", "preview", "-f", previewExample, "--selector", "ring=canary")
	for _, want := range []string{canaries[0].Name, "memoryLimit", "shop/no-limit-1", "cert-manager.io", "workload-limits"} {
		if !strings.Contains(table, want) {
			t.Errorf("the preview table lacks %q:\n%s", want, table)
		}
	}

	// curl reads the first preview back from the hub's Connect JSON endpoint.
	ca := filepath.Join(work, "ca.crt")
	if err := os.WriteFile(ca, h.caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	raw, err := exec.Command("curl", "-sS", "--fail-with-body", "--cacert", ca, "-H", "Authorization: Bearer "+h.adminToken,
		"-H", "Content-Type: application/json", "-d", fmt.Sprintf(`{"previewId":%q}`, got.GetPreviewId()),
		h.url()+"/kollect.fleet.v1.FleetService/GetPreview").CombinedOutput()
	if err != nil {
		t.Fatalf("curl GetPreview: %v:\n%s", err, raw)
	}
	var again fleetv1.GetPreviewResponse
	if err := protojson.Unmarshal(raw, &again); err != nil || len(again.GetPreview().GetResults()) != 2 {
		t.Errorf("curl GetPreview: %v, %d results:\n%s", err, len(again.GetPreview().GetResults()), raw)
	}

	// Nothing was applied: the apiserver counted no write of the bundle's kinds or of
	// Deployments on any cluster, across both previews, and no cluster holds a bundle.
	if after := previewWrites(t, cps); !slices.Equal(before, after) {
		t.Errorf("writes of %v per cluster went from %v to %v during the previews", previewWritten, before, after)
	}
	clusters, err := admin.ListClusters(ctx, connect.NewRequest(&fleetv1.ListClustersRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range clusters.Msg.GetClusters() {
		if len(c.GetBundles()) != 0 {
			t.Errorf("cluster %s holds bundles %v after a preview", c.GetName(), c.GetBundles())
		}
	}
	audit, err := admin.ListAuditEvents(ctx, connect.NewRequest(&fleetv1.ListAuditEventsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	previews := 0
	for _, e := range audit.Msg.GetEvents() {
		if strings.Contains(strings.ToLower(e.GetAction()), "preview") {
			previews++
		}
	}
	if previews != 2 {
		t.Errorf("the audit log holds %d preview entries, want 2: %v", previews, audit.Msg.GetEvents())
	}
}

// seedPreviewDeployments creates the Deployments the preview reads in namespace shop: four
// with a memory limit (images nginx:1.27 ×2, redis:7, busybox:1.36; teams a and b, one
// without), two without (no-limit-1, no-limit-2).
func seedPreviewDeployments(t *testing.T, cp *testenv.ControlPlane) {
	t.Helper()
	ctx := context.Background()
	if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}); err != nil {
		t.Fatal(err)
	}
	type spec struct{ name, image, team, memory string }
	for _, s := range []spec{
		{"web", "nginx:1.27", "a", "256Mi"}, {"api", "nginx:1.27", "a", "512Mi"},
		{"cache", "redis:7", "b", "1Gi"}, {"tools", "busybox:1.36", "", "64Mi"},
		{"no-limit-1", "nginx:1.27", "b", ""}, {"no-limit-2", "redis:7", "a", ""},
	} {
		labels := map[string]string{"app": s.name}
		if s.team != "" {
			labels["team"] = s.team
		}
		c := corev1.Container{Name: "main", Image: s.image}
		if s.memory != "" {
			c.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(s.memory)}
		}
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: s.name, Labels: labels},
			Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": s.name}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": s.name}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}}}
		if err := cp.Client.Create(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
}

// checkPreviewResult checks one canary's answer to the example.
func checkPreviewResult(t *testing.T, r *fleetv1.PreviewResult, samples bool) {
	t.Helper()
	if r.GetError() != "" {
		t.Fatalf("%s: %s", r.GetCluster(), r.GetError())
	}
	targets := map[string]*fleetv1.PreviewTarget{}
	for _, tg := range r.GetTargets() {
		targets[tg.GetTarget()] = tg
	}
	w := targets["workload-limits"]
	if w == nil {
		t.Fatalf("%s: no answer for target workload-limits: %v", r.GetCluster(), r.GetTargets())
	}
	if w.GetKindState() != fleetv1.PreviewKindState_PREVIEW_KIND_STATE_SERVED || w.GetObjectsListed() != 6 ||
		w.GetObjectsMatched() != 6 || w.GetRows() != 4 || w.GetFailed() != 2 {
		t.Errorf("%s workload-limits: %s listed %d matched %d rows %d failed %d, want SERVED 6 6 4 2", r.GetCluster(),
			w.GetKindState(), w.GetObjectsListed(), w.GetObjectsMatched(), w.GetRows(), w.GetFailed())
	}
	attrs := map[string]*fleetv1.PreviewAttribute{}
	for _, a := range w.GetAttributes() {
		attrs[a.GetName()] = a
	}
	if a := attrs["memoryLimit"]; a.GetErrors() != 2 || len(a.GetErrorSamples()) != 2 {
		t.Errorf("%s memoryLimit: %d errors, samples %v; want the two Deployments without a limit", r.GetCluster(), a.GetErrors(), a.GetErrorSamples())
	} else {
		var names []string
		for _, e := range a.GetErrorSamples() {
			names = append(names, e.GetObject())
		}
		slices.Sort(names)
		if !slices.Equal(names, []string{"shop/no-limit-1", "shop/no-limit-2"}) || a.GetErrorSamples()[0].GetMessage() == "" {
			t.Errorf("%s memoryLimit error samples %v", r.GetCluster(), a.GetErrorSamples())
		}
	}
	// Over the four exported rows: images nginx, redis and busybox; teams a and b (one row
	// has none); four distinct limits.
	for name, want := range map[string]int64{"image": 3, "team": 2, "memoryLimit": 4} {
		if a := attrs[name]; a.GetDistinctValues() != want || a.GetDistinctValuesCapped() {
			t.Errorf("%s %s: %d distinct values (capped %v), want %d", r.GetCluster(), name, a.GetDistinctValues(), a.GetDistinctValuesCapped(), want)
		}
	}
	if c := targets["certificates"]; c.GetKindState() != fleetv1.PreviewKindState_PREVIEW_KIND_STATE_NOT_SERVED ||
		!strings.Contains(c.GetMessage(), "cert-manager.io") {
		t.Errorf("%s certificates: %s %q, want NOT_SERVED naming cert-manager.io", r.GetCluster(), c.GetKindState(), c.GetMessage())
	}
	if len(r.GetInventories()) != 1 || r.GetInventories()[0].GetInventory() != "workload-limits" || r.GetInventories()[0].GetRows() != 4 {
		t.Errorf("%s inventories %v, want workload-limits with 4 rows", r.GetCluster(), r.GetInventories())
	}
	if samples {
		if r.GetSamplesRefused() || len(w.GetSamples()) != 2 || !strings.Contains(w.GetSamples()[0].GetAttributesJson(), `"memoryLimit"`) {
			t.Errorf("%s (--preview-samples): refused %v, samples %v; want 2 rows", r.GetCluster(), r.GetSamplesRefused(), w.GetSamples())
		}
		return
	}
	if !r.GetSamplesRefused() || len(w.GetSamples()) != 0 {
		t.Errorf("%s (no --preview-samples): refused %v, samples %v; want refused, none", r.GetCluster(), r.GetSamplesRefused(), w.GetSamples())
	}
}

// checkEstimatedBytes compares the agent's estimate of one export with the NDJSON that the
// shipped `kollect collect` prints for the same file on the same cluster (less the Certificate
// target, which collect refuses on a cluster that does not serve the kind): the same rows in
// the same encoding, but for the fields a live export stamps (times, generations), so within
// 25%.
func checkEstimatedBytes(t *testing.T, cp *testenv.ControlPlane, r *fleetv1.PreviewResult) {
	t.Helper()
	raw, err := os.ReadFile(previewExample)
	if err != nil {
		t.Fatal(err)
	}
	var docs []string
	for _, d := range strings.Split(string(raw), "\n---\n") {
		if !strings.Contains(d, "certificates") {
			docs = append(docs, d)
		} else if strings.Contains(d, "kind: KollectClusterInventory") {
			docs = append(docs, strings.Replace(d, "    - name: certificates\n", "", 1))
		}
	}
	file := filepath.Join(t.TempDir(), "workloads.yaml")
	if err := os.WriteFile(file, []byte(strings.Join(docs, "\n---\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bins.kollect, "collect", file, "--kubeconfig", cp.Kubeconfig, "-o", "ndjson")
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() != 1) {
		t.Fatalf("kollect collect: %v:\n%s", err, out)
	}
	est := r.GetInventories()[0].GetEstimatedBytes()
	if n := int64(len(out)); est < n*3/4 || est > n*5/4 {
		t.Errorf("%s: estimated %d bytes per export; kollect collect prints %d bytes of NDJSON for the same rows", cp.Name, est, n)
	}
}

// previewWrites reads each cluster's write count of previewWritten.
func previewWrites(t *testing.T, cps []*testenv.ControlPlane) []int {
	t.Helper()
	var out []int
	for _, cp := range cps {
		n, err := cp.Writes(context.Background(), previewWritten...)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
}
