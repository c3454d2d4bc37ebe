package fleet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"
	"kollect.dev/testenv"
)

// The fleet the rollout tests share: one hub, three control planes with agents, one bundle.

// rolloutBundleName is the bundle every rollout subtest moves.
const rolloutBundleName = "inventory"

// rolloutTemplate is the bundle: a profile over ConfigMaps (its target, attributes and the
// target's label selector vary per revision), a git sink and a cluster inventory.
const rolloutTemplate = `apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: colors}
spec:
  target: %s
  attributes:
%s---
apiVersion: kollect.dev/v1alpha1
kind: KollectClusterTarget
metadata: {name: colors}
spec:
  profileRef: {name: colors, namespace: kollect-fleet}
  labelSelector: {matchLabels: %s}
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
  targets: [%s]
  sinks:
    snapshot: [{name: fleet-repo, namespace: kollect-fleet}]
  debounce: %s
  maxDelay: 10s
`

// unservedTarget is a profile and a target for a kind no cluster serves: the hub cannot know,
// the agent reports the inventory that lists the target not Ready (TargetsIncomplete).
const unservedTarget = `---
apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: widgets}
spec:
  target: {group: widgets.example.com, version: v1, kind: Widget}
  attributes:
    - {name: size, jsonPath: "{.spec.size}", optional: true}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectClusterTarget
metadata: {name: widgets}
spec:
  profileRef: {name: widgets, namespace: kollect-fleet}
`

// revision is one version of the bundle's content.
type revision struct {
	target   string   // the profile's target
	attrs    []string // attributes read from .data
	selector string   // matchLabels of the target
	debounce string
	// widgets adds unservedTarget to the inventory.
	widgets bool
}

var baseRevision = revision{target: "{version: v1, kind: ConfigMap}", attrs: []string{"color"}, selector: "{inventory: fleet}", debounce: "1s"}

func (r revision) manifests(repo string) string {
	var attrs strings.Builder
	for _, a := range r.attrs {
		fmt.Fprintf(&attrs, "    - {name: %s, jsonPath: \"{.data.%s}\", optional: true}\n", a, a)
	}
	targets := "{name: colors}"
	if r.widgets {
		targets += ", {name: widgets}"
	}
	doc := fmt.Sprintf(rolloutTemplate, r.target, attrs.String(), r.selector, repo, targets, r.debounce)
	if r.widgets {
		doc += unservedTarget
	}
	return doc
}

// rolloutFleet is the shared fleet: cps[0] is the canary (ring=canary), the others ring=main.
type rolloutFleet struct {
	h      *hub
	admin  fleetv1connect.FleetServiceClient
	cps    []*testenv.ControlPlane
	agents []*agent
	repo   string
	work   string
	// kollect runs the CLI logged in as admin.
	kollect func(args ...string) (string, int)
}

// colors are the ConfigMaps every cluster holds; only red carries keep=yes.
var colors = map[string]string{"red": "s", "blue": "m", "green": "l", "yellow": "xl"}

func startRolloutFleet(t *testing.T) *rolloutFleet {
	t.Helper()
	ctx := context.Background()
	f := &rolloutFleet{work: t.TempDir()}
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	f.h = startHub(t, f.work, fmt.Sprintf("127.0.0.1:%d", port))
	f.admin = f.h.fleet(f.h.adminToken)
	tok, err := f.admin.CreateBootstrapToken(ctx, connect.NewRequest(&fleetv1.CreateBootstrapTokenRequest{
		Description: "rollouts", Ttl: durationpb.New(time.Hour), MaxUses: 3}))
	if err != nil {
		t.Fatal(err)
	}
	if f.cps, err = testenv.StartN("ro", 3, testenv.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testenv.StopAll(f.cps) })
	if f.repo, err = testenv.InitBareRepo(filepath.Join(f.work, "fleet.git")); err != nil {
		t.Fatal(err)
	}
	for i, cp := range f.cps {
		ring := "main"
		if i == 0 {
			ring = "canary"
		}
		f.agents = append(f.agents, startAgent(t, cp, f.h, tok.Msg.GetSecret(), "env=e2e,ring="+ring))
		for name, size := range colors {
			labels := map[string]string{"inventory": "fleet"}
			if name == "red" {
				labels["keep"] = "yes"
			}
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: labels},
				Data: map[string]string{"color": name, "size": size}}
			if err := cp.Client.Create(ctx, cm); err != nil {
				t.Fatal(err)
			}
		}
	}
	f.kollect = kollectCLI(t, filepath.Join(f.work, "hub.json"))
	if out, code := f.kollect("hub", "login", "--url", "https://"+f.h.addr, "--token", f.h.adminToken, "--ca-fingerprint", f.h.fingerprint); code != 0 {
		t.Fatalf("login: exit %d:\n%s", code, out)
	}
	eventually(t, 60*time.Second, "three registered clusters", func() (bool, string) {
		l, err := f.admin.ListClusters(ctx, connect.NewRequest(&fleetv1.ListClustersRequest{}))
		if err != nil {
			return false, err.Error()
		}
		return len(l.Msg.GetClusters()) == 3, fmt.Sprint(len(l.Msg.GetClusters()))
	})
	// Revision 1 goes everywhere at once: the stable revision the rollouts start from.
	if rev := f.apply(t, baseRevision, false, "first"); rev != 1 {
		t.Fatalf("first revision is %d", rev)
	}
	f.waitApplied(t, 90*time.Second, 1, f.names()...)
	eventually(t, 90*time.Second, "every cluster's rows in the repository", func() (bool, string) {
		for _, cp := range f.cps {
			if doc := repoShow(t, f.repo, cp.Name+"/fleet.yaml"); !strings.Contains(doc, "color: yellow") {
				return false, cp.Name + ":\n" + doc
			}
		}
		return true, ""
	})
	return f
}

func (f *rolloutFleet) names() []string {
	var names []string
	for _, cp := range f.cps {
		names = append(names, cp.Name)
	}
	return names
}

// apply stores a revision of the bundle (held unless hold is false) and returns its number.
func (f *rolloutFleet) apply(t *testing.T, r revision, hold bool, message string) int64 {
	t.Helper()
	resp, err := f.admin.ApplyBundle(context.Background(), connect.NewRequest(&fleetv1.ApplyBundleRequest{Name: rolloutBundleName,
		Manifests: r.manifests(f.repo), ClusterSelector: &fleetv1.LabelSelector{MatchLabels: map[string]string{"env": "e2e"}},
		Message: message, Hold: hold}))
	if err != nil {
		t.Fatalf("ApplyBundle %q: %v", message, err)
	}
	if !resp.Msg.GetCreated() {
		t.Fatalf("ApplyBundle %q created nothing", message)
	}
	return resp.Msg.GetRevision().GetRevision()
}

func (f *rolloutFleet) start(t *testing.T, s *fleetv1.RolloutStrategy) *fleetv1.Rollout {
	t.Helper()
	resp, err := f.admin.StartRollout(context.Background(), connect.NewRequest(&fleetv1.StartRolloutRequest{Bundle: rolloutBundleName, Strategy: s}))
	if err != nil {
		t.Fatalf("StartRollout: %v", err)
	}
	return resp.Msg.GetRollout()
}

func (f *rolloutFleet) get(t *testing.T, id int64) *fleetv1.Rollout {
	t.Helper()
	resp, err := f.admin.GetRollout(context.Background(), connect.NewRequest(&fleetv1.GetRolloutRequest{Id: id}))
	if err != nil {
		t.Fatalf("GetRollout %d: %v", id, err)
	}
	return resp.Msg.GetRollout()
}

// waitRollout waits until rollout id satisfies cond and returns it.
func (f *rolloutFleet) waitRollout(t *testing.T, id int64, timeout time.Duration, what string, cond func(*fleetv1.Rollout) bool) *fleetv1.Rollout {
	t.Helper()
	var last *fleetv1.Rollout
	eventually(t, timeout, fmt.Sprintf("rollout %d: %s", id, what), func() (bool, string) {
		resp, err := f.admin.GetRollout(context.Background(), connect.NewRequest(&fleetv1.GetRolloutRequest{Id: id}))
		if err != nil {
			return false, err.Error()
		}
		last = resp.Msg.GetRollout()
		return cond(last), describeRollout(last)
	})
	return last
}

func (f *rolloutFleet) waitPhase(t *testing.T, id int64, timeout time.Duration, phase fleetv1.RolloutPhase) *fleetv1.Rollout {
	t.Helper()
	return f.waitRollout(t, id, timeout, phase.String(), func(r *fleetv1.Rollout) bool { return r.GetPhase() == phase })
}

// describeRollout is a rollout for failure messages: phase, message, waves and clusters.
func describeRollout(r *fleetv1.Rollout) string {
	var b strings.Builder
	fmt.Fprintf(&b, "rollout %d %d->%d %s %q wave %d\n", r.GetId(), r.GetFromRevision(), r.GetToRevision(), r.GetPhase(), r.GetMessage(), r.GetCurrentWave())
	for _, w := range r.GetWaves() {
		fmt.Fprintf(&b, "  %s %s total %d pending %d progress %d healthy %d failed %d\n", w.GetName(), w.GetPhase(), w.GetClustersTotal(),
			w.GetClustersPending(), w.GetClustersInProgress(), w.GetClustersHealthy(), w.GetClustersFailed())
	}
	for _, c := range r.GetClusters() {
		fmt.Fprintf(&b, "  %s wave %d %s gate %q %q\n", c.GetCluster(), c.GetWave(), c.GetState(), c.GetGate(), c.GetMessage())
	}
	return b.String()
}

// bundleOn returns each cluster's desired and applied revision of the bundle.
func (f *rolloutFleet) bundleOn(t *testing.T) map[string]*fleetv1.ClusterBundle {
	t.Helper()
	l, err := f.admin.ListClusters(context.Background(), connect.NewRequest(&fleetv1.ListClustersRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*fleetv1.ClusterBundle{}
	for _, c := range l.Msg.GetClusters() {
		out[c.GetName()] = &fleetv1.ClusterBundle{}
		for _, b := range c.GetBundles() {
			if b.GetBundle() == rolloutBundleName {
				out[c.GetName()] = b
			}
		}
	}
	return out
}

// waitApplied waits until the named clusters want and have applied revision rev.
func (f *rolloutFleet) waitApplied(t *testing.T, timeout time.Duration, rev int64, clusters ...string) {
	t.Helper()
	eventually(t, timeout, fmt.Sprintf("revision %d applied on %v", rev, clusters), func() (bool, string) {
		on := f.bundleOn(t)
		for _, c := range clusters {
			if on[c].GetDesiredRevision() != rev || on[c].GetAppliedRevision() != rev {
				return false, describeBundles(on)
			}
		}
		return true, ""
	})
}

// desired returns the desired revision of every cluster, for comparisons.
func (f *rolloutFleet) desired(t *testing.T) map[string]int64 {
	out := map[string]int64{}
	for c, b := range f.bundleOn(t) {
		out[c] = b.GetDesiredRevision()
	}
	return out
}

func describeBundles(on map[string]*fleetv1.ClusterBundle) string {
	var parts []string
	for c, b := range on {
		parts = append(parts, fmt.Sprintf("%s desired %d applied %d failed %d", c, b.GetDesiredRevision(), b.GetAppliedRevision(), b.GetFailedObjects()))
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

// stableRevision is the bundle's stable revision and active rollout.
func (f *rolloutFleet) stableRevision(t *testing.T) (int64, int64) {
	t.Helper()
	resp, err := f.admin.GetBundle(context.Background(), connect.NewRequest(&fleetv1.GetBundleRequest{Name: rolloutBundleName}))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Msg.GetBundle().GetStableRevision(), resp.Msg.GetBundle().GetActiveRolloutId()
}

// inventoryTargets lists the targets of the fleet inventory on a cluster.
func inventoryTargets(t *testing.T, cp *testenv.ControlPlane) string {
	t.Helper()
	inv := &kollectv1.KollectClusterInventory{}
	if err := cp.Client.Get(context.Background(), client.ObjectKey{Name: "fleet"}, inv); err != nil {
		return "error: " + err.Error()
	}
	var names []string
	for _, tg := range inv.Spec.Targets {
		names = append(names, tg.Name)
	}
	return strings.Join(names, ",")
}

// hasWidgetsTarget says whether the unserved target exists on a cluster.
func hasWidgetsTarget(t *testing.T, cp *testenv.ControlPlane) bool {
	t.Helper()
	err := cp.Client.Get(context.Background(), client.ObjectKey{Name: "widgets"}, &kollectv1.KollectClusterTarget{})
	return err == nil
}

// inventoryReady is the Ready condition of the fleet inventory on a cluster.
func inventoryReady(t *testing.T, cp *testenv.ControlPlane) metav1.Condition {
	t.Helper()
	inv := &kollectv1.KollectClusterInventory{}
	if err := cp.Client.Get(context.Background(), client.ObjectKey{Name: "fleet"}, inv); err != nil {
		return metav1.Condition{Message: err.Error()}
	}
	for _, c := range inv.Status.Conditions {
		if c.Type == kollectv1.ConditionReady {
			return c
		}
	}
	return metav1.Condition{Message: "no Ready condition"}
}

// clusterOf returns the named cluster of a rollout.
func clusterOf(r *fleetv1.Rollout, name string) *fleetv1.RolloutCluster {
	for _, c := range r.GetClusters() {
		if c.GetCluster() == name {
			return c
		}
	}
	return &fleetv1.RolloutCluster{}
}

// evaluations reads the hub's kollect_hub_rollout_evaluations_total: its rollout engine's
// completed evaluations of an active rollout.
func (f *rolloutFleet) evaluations(t *testing.T) int64 {
	t.Helper()
	caPEM, err := os.ReadFile(filepath.Join(f.h.dir, "data", "pki", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}}}
	req, err := http.NewRequest(http.MethodGet, "https://"+f.h.addr+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+f.h.adminToken)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("hub /metrics: %d %v", resp.StatusCode, err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "kollect_hub_rollout_evaluations_total "); ok {
			var n float64
			if _, err := fmt.Sscan(v, &n); err == nil {
				return int64(n)
			}
		}
	}
	t.Fatal("no kollect_hub_rollout_evaluations_total on the hub's /metrics")
	return 0
}

// awaitEvaluations closes the window of a negative about a rollout ("nothing moved"): it
// waits until the hub's engine has completed two evaluations beyond the count at the call, so
// that a whole evaluation started after it and wrote what it would. It replaces a sleep.
func (f *rolloutFleet) awaitEvaluations(t *testing.T) {
	t.Helper()
	from := f.evaluations(t)
	eventually(t, 60*time.Second, "two evaluations of the rollout engine", func() (bool, string) {
		n := f.evaluations(t)
		return n >= from+2, fmt.Sprintf("%d evaluations, want %d (the engine evaluates active rollouts only: did the rollout end?)", n, from+2)
	})
}
