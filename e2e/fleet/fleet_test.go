package fleet

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
	"kollect.dev/api/version"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"
	"kollect.dev/testenv"
)

const bundleTemplate = `apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: configmaps}
spec:
  target: {version: v1, kind: ConfigMap}
  attributes:
    - {name: color, jsonPath: "{.data.color}", optional: true}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectClusterTarget
metadata: {name: configmaps}
spec:
  profileRef: {name: configmaps, namespace: kollect-fleet}
  labelSelector: {matchLabels: {inventory: fleet}}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectSnapshotSink
metadata: {name: fleet-repo}
spec:
  type: git
  git: {url: "file://%s"}
  layout: {mode: document}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectClusterInventory
metadata: {name: fleet}
spec:
  targets: [{name: configmaps}]
  sinks:
    snapshot: [{name: fleet-repo, namespace: kollect-fleet}]
  debounce: %s
  maxDelay: 10s
`

// TestFleet: a hub and three agents on three control planes. A bundle reaches all three,
// each exports with its cluster label to one repository; a local edit of a hub-managed
// object is reverted and reported, and so are a local deletion and label and annotation
// drift; the hub restarting changes nothing on the clusters; with
// the hub down the agents keep exporting; a revoked agent is refused; a viewer cannot change
// a bundle; a bundle with a broken CEL expression is refused naming the object.
func TestFleet(t *testing.T) {
	t.Parallel() // its own control planes, hub and ports: it waits alongside the others
	ctx := context.Background()
	work := t.TempDir()
	h, admin, token := startHubWithToken(t, work, 3)
	cps, err := testenv.StartN("fleet", 3, testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testenv.StopAll(cps) })
	repo, err := testenv.InitBareRepo(filepath.Join(work, "fleet.git"))
	if err != nil {
		t.Fatal(err)
	}
	for i, cp := range cps {
		bin := bins.agent
		if i == len(cps)-1 {
			bin = bins.olderAgent // one cluster lags behind: the version-skew view must show it
		}
		startAgentBinary(t, bin, cp, h, token, "env=e2e")
		for _, name := range []string{"red", "blue"} {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{"inventory": "fleet"}},
				Data: map[string]string{"color": name}}
			if err := cp.Client.Create(ctx, cm); err != nil {
				t.Fatal(err)
			}
		}
	}
	eventually(t, 60*time.Second, "three registered clusters", func() (bool, string) {
		l, err := admin.ListClusters(ctx, connect.NewRequest(&fleetv1.ListClustersRequest{}))
		if err != nil {
			return false, err.Error()
		}
		return len(l.Msg.GetClusters()) == 3, fmt.Sprint(len(l.Msg.GetClusters()))
	})
	checkVersionSkew(t, admin, cps[len(cps)-1].Name)

	// A viewer may look but not change bundles.
	viewer, err := admin.CreateAPIToken(ctx, connect.NewRequest(&fleetv1.CreateAPITokenRequest{Name: "viewer", Role: fleetv1.Role_ROLE_VIEWER}))
	if err != nil {
		t.Fatal(err)
	}
	manifests := fmt.Sprintf(bundleTemplate, repo, "1s")
	selector := &fleetv1.LabelSelector{MatchLabels: map[string]string{"env": "e2e"}}
	_, err = h.fleet(viewer.Msg.GetSecret()).ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{
		Name: "inventory", Manifests: manifests, ClusterSelector: selector}))
	if connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("viewer ApplyBundle: %v, want PermissionDenied", err)
	}
	// A broken CEL expression is refused with the object's name.
	bad := strings.Replace(manifests, `jsonPath: "{.data.color}"`, `cel: "object.data.color +"`, 1)
	_, err = admin.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{Name: "inventory", Manifests: bad, ClusterSelector: selector}))
	if err == nil || !strings.Contains(err.Error(), "configmaps") {
		t.Fatalf("bad CEL bundle: %v, want a refusal naming KollectProfile configmaps", err)
	}

	if _, err := admin.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{
		Name: "inventory", Manifests: manifests, ClusterSelector: selector, Message: "first"})); err != nil {
		t.Fatal(err)
	}
	// Every cluster exports its own rows, labelled with its name, to the shared repository.
	eventually(t, 120*time.Second, "all three clusters in the repository", func() (bool, string) {
		files := repoFiles(t, repo)
		var missing []string
		for _, cp := range cps {
			if !strings.Contains(files, cp.Name+"/fleet.yaml") {
				missing = append(missing, cp.Name)
			}
		}
		return len(missing) == 0, "missing " + strings.Join(missing, ",") + " in\n" + files
	})
	if merges, _ := exec.Command("git", "--git-dir", repo, "rev-list", "--merges", "main").CombinedOutput(); len(merges) != 0 {
		t.Fatalf("three agents pushing to one repository made merge commits: %s", merges)
	}
	doc := repoShow(t, repo, cps[1].Name+"/fleet.yaml")
	if !strings.Contains(doc, "cluster: "+cps[1].Name) || strings.Contains(doc, "cluster: "+cps[0].Name) || !strings.Contains(doc, "color: blue") {
		t.Fatalf("%s/fleet.yaml:\n%s", cps[1].Name, doc)
	}

	// A local edit of a hub-managed object is reverted and reported to the hub.
	c0 := cps[0].Client
	inv := &kollectv1.KollectClusterInventory{}
	if err := c0.Get(ctx, client.ObjectKey{Name: "fleet"}, inv); err != nil {
		t.Fatal(err)
	}
	inv.Spec.Debounce = metav1.Duration{Duration: 7 * time.Second}
	if err := c0.Update(ctx, inv, client.FieldOwner("kubectl-edit")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the edit reverted", func() (bool, string) {
		_ = c0.Get(ctx, client.ObjectKey{Name: "fleet"}, inv)
		return inv.Spec.Debounce.Duration == time.Second, inv.Spec.Debounce.String()
	})
	eventually(t, 30*time.Second, "the drift reported to the hub", func() (bool, string) {
		c, err := admin.GetCluster(ctx, connect.NewRequest(&fleetv1.GetClusterRequest{Name: cps[0].Name}))
		if err != nil {
			return false, err.Error()
		}
		for _, b := range c.Msg.GetStatus().GetBundles() {
			for _, o := range b.GetObjects() {
				if o.GetResult() == fleetv1.ApplyResult_APPLY_RESULT_DRIFT_REVERTED && strings.Contains(o.GetMessage(), "kubectl-edit") {
					return true, ""
				}
			}
		}
		return false, c.Msg.String()
	})
	checkLocalDeletionAndMetadataDrift(t, admin, cps[0])

	// The hub restarts: agents reconnect and nothing is re-applied.
	before := inventoryVersions(t, cps)
	writesBefore := bundleWrites(t, cps)
	h.stop()
	// With the hub down, agents keep exporting.
	c2 := cps[2].Client
	if err := c2.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "green",
		Labels: map[string]string{"inventory": "fleet"}}, Data: map[string]string{"color": "green"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "an export while the hub is down", func() (bool, string) {
		d := repoShow(t, repo, cps[2].Name+"/fleet.yaml")
		return strings.Contains(d, "color: green"), d
	})
	h.start()
	eventually(t, 60*time.Second, "agents heartbeat to the restarted hub", func() (bool, string) {
		l, err := admin.ListClusters(ctx, connect.NewRequest(&fleetv1.ListClustersRequest{}))
		if err != nil {
			return false, err.Error()
		}
		for _, c := range l.Msg.GetClusters() {
			if time.Since(c.GetLastHeartbeat().AsTime()) > 3*time.Second {
				return false, c.GetName() + " has no recent heartbeat"
			}
		}
		return true, ""
	})
	// The window closes on a second bundle applied by every agent: an agent handles its
	// configuration messages in order, so the one the restarted hub sent first (unchanged)
	// was handled before. Applying the new configuration server-side-applies each object of
	// the first bundle once (a no-op the API server still counts): exactly one write each of
	// its inventory, target and sink per cluster; a re-apply on reconnection would add more.
	if _, err := admin.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{Name: "marker", ClusterSelector: selector,
		Manifests: "apiVersion: kollect.dev/v1alpha1\nkind: KollectProfile\nmetadata: {name: marker}\nspec:\n  target: {version: v1, kind: Secret}\n  attributes: [{name: type, jsonPath: \"{.type}\"}]\n"})); err != nil {
		t.Fatal(err)
	}
	for _, cp := range cps {
		waitApplied(t, h, cp.Name, "marker", 1)
	}
	if after := inventoryVersions(t, cps); after != before {
		t.Fatalf("hub restart re-applied objects: resourceVersions %s -> %s", before, after)
	}
	if after := bundleWrites(t, cps); after != bundleWritesPlus(writesBefore, 3) {
		t.Fatalf("hub restart re-applied objects: the API servers counted writes of the first bundle's kinds %s -> %s (want 3 more each)",
			writesBefore, after)
	}

	// A revoked agent is refused on its next call.
	if _, err := admin.RevokeAgent(ctx, connect.NewRequest(&fleetv1.RevokeAgentRequest{ClusterName: cps[2].Name})); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the revoked cluster shown as revoked", func() (bool, string) {
		c, err := admin.GetCluster(ctx, connect.NewRequest(&fleetv1.GetClusterRequest{Name: cps[2].Name}))
		if err != nil {
			return false, err.Error()
		}
		return c.Msg.GetCluster().GetState() == fleetv1.ClusterState_CLUSTER_STATE_REVOKED, c.Msg.GetCluster().GetState().String()
	})
}

// bundleWrites is, per control plane, the API server's count of writes (status excluded) of
// the kinds of the first bundle other than KollectProfile.
func bundleWrites(t *testing.T, cps []*testenv.ControlPlane) string {
	t.Helper()
	var parts []string
	for _, cp := range cps {
		n, err := cp.Writes(context.Background(), "kollectclusterinventories", "kollectclustertargets", "kollectsnapshotsinks")
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, fmt.Sprintf("%s:%d", cp.Name, n))
	}
	return strings.Join(parts, ",")
}

// bundleWritesPlus adds n to every count of a bundleWrites result.
func bundleWritesPlus(writes string, n int) string {
	var parts []string
	for _, p := range strings.Split(writes, ",") {
		name, count, _ := strings.Cut(p, ":")
		var c int
		_, _ = fmt.Sscan(count, &c)
		parts = append(parts, fmt.Sprintf("%s:%d", name, c+n))
	}
	return strings.Join(parts, ",")
}

func inventoryVersions(t *testing.T, cps []*testenv.ControlPlane) string {
	var parts []string
	for _, cp := range cps {
		inv := &kollectv1.KollectClusterInventory{}
		if err := cp.Client.Get(context.Background(), client.ObjectKey{Name: "fleet"}, inv); err != nil {
			t.Fatal(err)
		}
		applied := ""
		for _, mf := range inv.ManagedFields {
			if mf.Manager == "kollect-hub" && mf.Operation == metav1.ManagedFieldsOperationApply && mf.Time != nil {
				applied = mf.Time.String()
			}
		}
		parts = append(parts, fmt.Sprintf("%s:gen%d@%s", cp.Name, inv.Generation, applied))
	}
	return strings.Join(parts, ",")
}

func repoFiles(t *testing.T, repo string) string {
	out, _ := exec.Command("git", "--git-dir", repo, "ls-tree", "-r", "--name-only", "main").CombinedOutput()
	return string(out)
}

func repoShow(t *testing.T, repo, path string) string {
	out, _ := exec.Command("git", "--git-dir", repo, "show", "main:"+path).CombinedOutput()
	return string(out)
}

// checkVersionSkew: every agent reports the version its build was stamped with (never the
// unstamped "dev"), and the hub's version-skew view marks exactly the cluster whose agent is
// older than the fleet's most common version.
func checkVersionSkew(t *testing.T, admin fleetv1connect.FleetServiceClient, older string) {
	t.Helper()
	if bins.version == "" || bins.version == version.Unstamped {
		t.Fatalf("make build stamps %q, want a real version", bins.version)
	}
	ctx := context.Background()
	eventually(t, 30*time.Second, "agent versions reported", func() (bool, string) {
		l, err := admin.ListClusters(ctx, connect.NewRequest(&fleetv1.ListClustersRequest{}))
		if err != nil {
			return false, err.Error()
		}
		var got []string
		ok := true
		for _, c := range l.Msg.GetClusters() {
			want, skew := bins.version, false
			if c.GetName() == older {
				want, skew = olderAgentVersion, true
			}
			ok = ok && c.GetAgentVersion() == want && c.GetVersionSkew() == skew
			got = append(got, fmt.Sprintf("%s=%s skew=%v", c.GetName(), c.GetAgentVersion(), c.GetVersionSkew()))
		}
		return ok, strings.Join(got, ", ")
	})
}
