package fleet

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/testenv"
)

// apply releases manifests as the next revision of bundle through h (held for a rollout when
// hold); haPush goes to the real clusters only.
func (f *haFleetT) apply(t *testing.T, h *hub, bundle, manifests string, hold bool) {
	t.Helper()
	sel := map[string]string{"env": "ha"}
	if bundle == haPush {
		sel = map[string]string{"kind": "real"}
	}
	if _, err := h.fleet(f.token).ApplyBundle(context.Background(), connect.NewRequest(&fleetv1.ApplyBundleRequest{
		Name: bundle, Manifests: manifests, ClusterSelector: &fleetv1.LabelSelector{MatchLabels: sel}, Hold: hold})); err != nil {
		t.Fatalf("applying %s through %s: %v", bundle, h.addr, err)
	}
}

// psql runs a query on the hubs' database with psql and returns its unaligned rows.
func (f *haFleetT) psql(t *testing.T, query string) string {
	t.Helper()
	out, err := exec.Command("psql", f.dsn, "-v", "ON_ERROR_STOP=1", "-tAc", query).CombinedOutput()
	if err != nil {
		t.Fatalf("psql %q: %v: %s", query, err, out)
	}
	return strings.TrimSpace(string(out))
}

// waitApplied waits until every cluster reports revision rev of bundle applied, as the store
// (read with psql) has it.
func (f *haFleetT) waitApplied(t *testing.T, bundle string, rev int64) {
	t.Helper()
	q := fmt.Sprintf(`SELECT count(*) FROM cluster_bundles WHERE bundle = '%s' AND desired_revision = %d AND applied_revision = %d`, bundle, rev, rev)
	eventually(t, 90*time.Second, fmt.Sprintf("%s@%d applied on %d clusters", bundle, rev, haFleet), func() (bool, string) {
		got := f.psql(t, q)
		return got == strconv.Itoa(haFleet), got
	})
}

// waitRealApplied waits until every real cluster holds revision rev of the profile.
func (f *haFleetT) waitRealApplied(t *testing.T, rev int) {
	t.Helper()
	want := fmt.Sprintf("color%d", rev)
	for _, cp := range f.cps {
		eventually(t, 60*time.Second, cp.Name+" holding "+want, func() (bool, string) {
			u := &unstructured.Unstructured{}
			u.SetAPIVersion("kollect.dev/v1alpha1")
			u.SetKind("KollectProfile")
			if err := cp.Client.Get(context.Background(), client.ObjectKey{Namespace: "kollect-fleet", Name: "ha-colors"}, u); err != nil {
				return false, err.Error()
			}
			attrs, _, _ := unstructured.NestedSlice(u.Object, "spec", "attributes")
			got := fmt.Sprint(attrs)
			return strings.Contains(got, want), got
		})
	}
}

// applies is, per real cluster, how many server-side applies of kollect.dev objects its API
// server has served (apiserver_request_total, read with kubectl): the agents' only way of
// writing what the hub sends.
func (f *haFleetT) applies(t *testing.T) []int {
	t.Helper()
	assets, err := testenv.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, cp := range f.cps {
		raw, err := exec.Command(filepath.Join(assets, "kubectl"), "--kubeconfig", cp.Kubeconfig, "get", "--raw", "/metrics").Output()
		if err != nil {
			t.Fatalf("kubectl get --raw /metrics on %s: %v", cp.Name, err)
		}
		n := 0
		sc := bufio.NewScanner(strings.NewReader(string(raw)))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			l := sc.Text()
			if strings.HasPrefix(l, "apiserver_request_total{") && strings.Contains(l, `group="kollect.dev"`) && strings.Contains(l, `verb="APPLY"`) {
				v, _ := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
				n += int(v)
			}
		}
		out = append(out, n)
	}
	return out
}

func equalCounts(a, b []int) bool { return slices.Equal(a, b) }

// curl runs curl against h with the admin token, trusting the hubs' CA, and returns the body.
func (f *haFleetT) curl(t *testing.T, h *hub, args ...string) ([]byte, error) {
	t.Helper()
	base := []string{"-sS", "--fail", "--max-time", "10", "--cacert", f.caFile, "-H", "Authorization: Bearer " + f.token}
	return exec.Command("curl", append(base, args...)...).Output()
}

// metric sums every series of a metric on h's /metrics.
func (f *haFleetT) metric(t *testing.T, h *hub, name string) float64 {
	t.Helper()
	v, err := f.tryMetric(t, h, name)
	if err != nil {
		t.Fatalf("metrics of %s: %v", h.addr, err)
	}
	return v
}

func (f *haFleetT) tryMetric(t *testing.T, h *hub, name string) (float64, error) {
	raw, err := f.curl(t, h, h.url()+"/metrics")
	if err != nil {
		return 0, err
	}
	sum := 0.0
	for _, l := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(l, name); ok && (strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, "{")) {
			v, _ := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
			sum += v
		}
	}
	return sum, nil
}

// leader returns the index of the hub that drives rollouts, once exactly one does.
func (f *haFleetT) leader(t *testing.T) int {
	t.Helper()
	who := -1
	eventually(t, 30*time.Second, "exactly one hub driving rollouts", func() (bool, string) {
		a, b := f.metric(t, f.hubs[0], "kollect_hub_rollout_leader"), f.metric(t, f.hubs[1], "kollect_hub_rollout_leader")
		switch {
		case a == 1 && b == 0:
			who = 0
		case a == 0 && b == 1:
			who = 1
		}
		return who >= 0, fmt.Sprintf("leader metrics %v and %v", a, b)
	})
	return who
}

// waitConnected waits until the whole fleet holds configuration streams: on h, or when h is nil
// on the two hubs together. It polls the hubs' kollect_hub_connected_agents with curl.
func (f *haFleetT) waitConnected(t *testing.T, timeout time.Duration, h *hub) {
	t.Helper()
	hubs := f.hubs[:]
	if h != nil {
		hubs = []*hub{h}
	}
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		total, parts := 0.0, []string{}
		for _, h := range hubs {
			v, err := f.tryMetric(t, h, "kollect_hub_connected_agents")
			if err != nil {
				parts = append(parts, h.addr+": "+err.Error())
				continue
			}
			total += v
			parts = append(parts, fmt.Sprintf("%s: %v", h.addr, v))
		}
		if total == haFleet {
			return
		}
		last = strings.Join(parts, ", ")
		time.Sleep(100 * time.Millisecond)
	}
	// Which simulated agents are missing, and why their last stream ended (the real agents'
	// logs are printed by their cleanup).
	var missing []string
	for name, c := range f.sim.Connections() {
		if c.Since.IsZero() {
			missing = append(missing, fmt.Sprintf("%s on %s: %s", name, c.URL, c.LastError))
		}
	}
	sort.Strings(missing)
	t.Fatalf("the %d agents were not all connected within %v: %s; simulated agents without a stream: %d\n  %s",
		haFleet, timeout, last, len(missing), strings.Join(missing, "\n  "))
}

// rollout reads a rollout through h.
func (f *haFleetT) rollout(t *testing.T, h *hub, id int64) *fleetv1.Rollout {
	t.Helper()
	got, err := h.fleet(f.token).GetRollout(context.Background(), connect.NewRequest(&fleetv1.GetRolloutRequest{Id: id}))
	if err != nil {
		t.Fatalf("rollout %d through %s: %v", id, h.addr, err)
	}
	return got.Msg.GetRollout()
}

// checkSteps reads the audit log and the rollout's clusters with psql: each of the four waves
// started and completed once, the rollout completed once, no audit event is there twice, and
// every cluster of the fleet is in the rollout, healthy on revision rev.
func (f *haFleetT) checkSteps(t *testing.T, id int64, rev int) {
	t.Helper()
	target := fmt.Sprintf("rollout/%d", id)
	if dup := f.psql(t, `SELECT action || ': ' || detail || ' ×' || count(*) FROM audit_log WHERE target = '`+target+
		`' GROUP BY action, detail HAVING count(*) > 1`); dup != "" {
		t.Errorf("audit events of %s written more than once:\n%s", target, dup)
	}
	got := f.psql(t, `SELECT action || '=' || count(*) FROM audit_log WHERE target = '`+target+`' AND actor = 'hub' GROUP BY action ORDER BY action`)
	if want := "RolloutCompleted=1\nRolloutWaveCompleted=4\nRolloutWaveStarted=4"; got != want {
		t.Errorf("engine audit events of %s:\n%s\nwant:\n%s", target, got, want)
	}
	if got, want := f.psql(t, fmt.Sprintf(`SELECT state || '=' || count(*) FROM rollout_clusters WHERE rollout_id = %d GROUP BY state`, id)),
		fmt.Sprintf("healthy=%d", haFleet); got != want {
		t.Errorf("clusters of %s: %s, want %s", target, got, want)
	}
	if got := f.psql(t, fmt.Sprintf(`SELECT count(*) FROM cluster_bundles WHERE bundle = '%s' AND desired_revision = %d`, haBundle, rev)); got != strconv.Itoa(haFleet) {
		t.Errorf("%s clusters desire revision %d, want %d", got, rev, haFleet)
	}
}

// checkDashboard calls what the dashboard calls, ListClusters, on h with curl (Connect's JSON
// encoding) and wants the whole fleet there, online and in sync.
func (f *haFleetT) checkDashboard(t *testing.T, h *hub) {
	t.Helper()
	var last string
	eventually(t, 30*time.Second, "the whole fleet online and in sync on "+h.addr+"'s dashboard API", func() (bool, string) {
		raw, err := f.curl(t, h, "-X", "POST", "-H", "Content-Type: application/json", "-d", "{}",
			h.url()+"/kollect.fleet.v1.FleetService/ListClusters")
		if err != nil {
			return false, err.Error()
		}
		var resp struct {
			Clusters []struct {
				Name         string `json:"name"`
				State        string `json:"state"`
				ConfigInSync bool   `json:"configInSync"`
			} `json:"clusters"`
		}
		if err := json.Unmarshal(raw, &resp); err != nil {
			return false, err.Error()
		}
		online, inSync := 0, 0
		for _, c := range resp.Clusters {
			if c.State == "CLUSTER_STATE_ONLINE" {
				online++
			}
			if c.ConfigInSync {
				inSync++
			}
		}
		last = fmt.Sprintf("%d clusters, %d online, %d in sync", len(resp.Clusters), online, inSync)
		return len(resp.Clusters) == haFleet && online == haFleet && inSync == haFleet, last
	})
	t.Logf("%s's dashboard API: %s", h.addr, last)
}
