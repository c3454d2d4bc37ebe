package node

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/testenv"
)

// TestUpgradeFromPreviousRelease installs the previous release (previousRelease: its charts,
// and its binaries in images) on a real node, with a hub and two agents in one fleet, then
// upgrades it the way docs/upgrading.md says, one release at a time, checking the version skew
// a fleet lives in during a rollout:
//
//  1. agent A to the current release: a new agent against the old hub;
//  2. the hub: agent B, still old, against the new hub;
//
// and throughout: the CRDs upgrade in place under the existing objects, the new agent exports
// what changes, and no row it had exported is rewritten (PostgreSQL's own xmin of each row, the
// transaction that last wrote it, is the same before and after).
func TestUpgradeFromPreviousRelease(t *testing.T) {
	tree, prevImages, prev := previousBuild(t)
	cur, err := currentImages()
	if err != nil {
		t.Fatal(err)
	}
	e, err := newEnv("upgrade", filepath.Join(prevImages, "agent.tar"), filepath.Join(prevImages, "hub.tar"),
		filepath.Join(cur, "agent.tar"), filepath.Join(cur, "hub.tar"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.stop)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	defer e.diagnoseOnFailure(t)

	oldHub := filepath.Join(tree, "charts", "hub")
	oldAgent := filepath.Join(tree, "charts", "agent")
	h := e.installHub(ctx, t, oldHub, prev["hub"].Tag, "--set", "heartbeatInterval=2s")
	// Two agents, each the only one watching its team's namespace: two clusters of one fleet,
	// sharing the hub and the table. The CRDs and the webhook are A's release's.
	a := agentRelease{chart: oldAgent, tag: prev["agent"].Tag, replicas: 2, cluster: "node-a", team: "team-a", watchTeam: true}
	e.installAgent(ctx, t, h, a)
	b := agentRelease{chart: oldAgent, tag: prev["agent"].Tag, replicas: 1, name: "agent-b", namespace: "kollect-b",
		cluster: "node-b", team: "team-b", watchTeam: true,
		extra: []string{"--set", "crds.install=false", "--set", "webhook.enabled=false"}}
	e.installAgent(ctx, t, h, b)
	teams := map[string]string{"node-a": "team-a", "node-b": "team-b"}

	url, err := e.pg.CreateDatabase(ctx, "inventory")
	if err != nil {
		t.Fatal(err)
	}
	run(t, "psql", e.pg.URL, "-v", "ON_ERROR_STOP=1", "-qc",
		"CREATE ROLE kollect_agent LOGIN PASSWORD 'change-me'; ALTER DATABASE inventory OWNER TO kollect_agent")
	for cluster, team := range teams {
		if out, err := e.kubectlErr(e.postgresExample(t, "inventory", team), "apply", "-n", team, "-f", "-"); err != nil {
			t.Fatalf("applying docs/examples/database-postgres.yaml: %v\n%s", err, out)
		}
		for _, name := range []string{"web", "api"} {
			e.deployment(t, team, name)
			e.waitRowOf(ctx, t, url, cluster, team, name)
		}
	}
	before := rowVersions(t, url)

	// 1. Agent A to the current release, with the current chart: a new agent, the old hub.
	began := time.Now()
	e.helmRun(t, "upgrade", "kollect-agent", chart(t, "agent"), "-n", "kollect-system", "--reuse-values",
		"--set", "image.tag="+e.images["agent"].Tag, "--wait", "--timeout", "4m")
	e.deployment(t, "team-a", "after-agent-upgrade")
	e.waitRowOf(ctx, t, url, "node-a", "team-a", "after-agent-upgrade")
	t.Logf("agent upgrade: a change exported %v after helm upgrade began", time.Since(began).Round(100*time.Millisecond))
	e.waitHubSees(ctx, t, h, "node-a", e.images["agent"].Tag)
	e.checkCRDsCurrent(ctx, t)

	// 2. The hub to the current release: agent B, still the previous release, against it.
	e.helmRun(t, "upgrade", "kollect-hub", chart(t, "hub"), "-n", "kollect-hub", "--reuse-values",
		"--set", "image.tag="+e.images["hub"].Tag, "--wait", "--timeout", "4m")
	pods := e.readyPods(ctx, t, "kollect-hub", "app.kubernetes.io/name=kollect-hub", 1)
	h.podIP = pods[0].Status.PodIP
	upgraded := time.Now()
	for _, c := range []struct{ name, tag string }{{"node-a", e.images["agent"].Tag}, {"node-b", prev["agent"].Tag}} {
		e.waitHeartbeatAfter(ctx, t, h, c.name, upgraded)
		e.waitHubSees(ctx, t, h, c.name, c.tag)
	}
	for cluster, team := range teams {
		e.deployment(t, team, "after-hub-upgrade")
		e.waitRowOf(ctx, t, url, cluster, team, "after-hub-upgrade")
	}

	// No row the previous release wrote was written again.
	after := rowVersions(t, url)
	for key, xmin := range before {
		if after[key] != xmin {
			t.Errorf("row %s was rewritten by the upgrade (xmin %s → %s)", key, xmin, after[key])
		}
	}
}

// currentImages is the directory of `make images`.
func currentImages() (string, error) { return testenv.Images() }

// deployment creates a Deployment of no replicas (its row is what matters, not its pods).
func (e *env) deployment(t *testing.T, ns, name string) {
	t.Helper()
	e.kubectlRun(t, "create", "deployment", name, "-n", ns, "--image=registry.invalid/"+name+":1", "--replicas=0")
}

// waitRowOf waits until the shared table holds cluster's row of Deployment ns/name.
func (e *env) waitRowOf(ctx context.Context, t *testing.T, url, cluster, ns, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	eventually(ctx, t, fmt.Sprintf("the row of %s's Deployment %s", cluster, name), func() error {
		out, err := exec.Command("psql", url, "-tAc", fmt.Sprintf("SELECT count(*) FROM kollect.rows WHERE cluster = '%s' "+
			"AND kind = 'Deployment' AND namespace = '%s' AND name = '%s'", cluster, ns, name)).CombinedOutput()
		if err != nil {
			return fmt.Errorf("psql: %v: %s", err, out)
		}
		if strings.TrimSpace(string(out)) != "1" {
			return fmt.Errorf("%s rows", strings.TrimSpace(string(out)))
		}
		return nil
	})
}

// rowVersions maps each row's identity to its xmin: the id of the transaction that last
// inserted or updated it, kept by PostgreSQL itself.
func rowVersions(t *testing.T, url string) map[string]string {
	t.Helper()
	out := run(t, "psql", url, "-tAF", "|", "-c",
		"SELECT cluster || '/' || namespace || '/' || name, xmin::text FROM kollect.rows ORDER BY 1")
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if k, v, ok := strings.Cut(line, "|"); ok {
			m[k] = v
		}
	}
	if len(m) == 0 {
		t.Fatal("the rows table is empty")
	}
	return m
}

// checkCRDsCurrent: after the agent chart's upgrade the cluster serves the current API: every
// Kollect CRD's schemas are the current release's (api/crds), under the objects the previous
// release's agents made.
func (e *env) checkCRDsCurrent(ctx context.Context, t *testing.T) {
	t.Helper()
	want, err := testenv.KollectCRDs()
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		var got apiextensionsv1.CustomResourceDefinition
		if err := e.cluster.Client.Get(ctx, client.ObjectKey{Name: w.Name}, &got); err != nil {
			t.Fatalf("CRD %s after the upgrade: %v", w.Name, err)
		}
		if len(got.Spec.Versions) != len(w.Spec.Versions) {
			t.Errorf("CRD %s serves %d versions, the current release %d", w.Name, len(got.Spec.Versions), len(w.Spec.Versions))
			continue
		}
		for i := range w.Spec.Versions {
			if !equality.Semantic.DeepEqual(got.Spec.Versions[i].Schema, w.Spec.Versions[i].Schema) {
				t.Errorf("CRD %s version %s: the schema is not the current release's", w.Name, w.Spec.Versions[i].Name)
			}
		}
	}
	e.kubectlRun(t, "get", "kollectinventory", "-n", "team-a", "pg-workloads")
}

// waitHubSees waits until the hub reports cluster running an agent of the image tag's version.
func (e *env) waitHubSees(ctx context.Context, t *testing.T, h hubInstall, cluster, tag string) {
	t.Helper()
	want := strings.TrimPrefix(strings.Replace(tag, "-g", "+g", 1), "v")
	eventually(ctx, t, fmt.Sprintf("the hub reports %s's agent at %s", cluster, want), func() error {
		c, err := e.hubCluster(t, h, cluster)
		if err != nil {
			return err
		}
		if v, _ := c["agentVersion"].(string); strings.TrimPrefix(v, "v") != want {
			return fmt.Errorf("agentVersion %q", v)
		}
		return nil
	})
}

// waitHeartbeatAfter waits until the hub has a heartbeat from cluster later than since.
func (e *env) waitHeartbeatAfter(ctx context.Context, t *testing.T, h hubInstall, cluster string, since time.Time) {
	t.Helper()
	eventually(ctx, t, fmt.Sprintf("a heartbeat of %s to the upgraded hub", cluster), func() error {
		c, err := e.hubCluster(t, h, cluster)
		if err != nil {
			return err
		}
		s, _ := c["lastHeartbeat"].(string)
		hb, err := time.Parse(time.RFC3339Nano, s)
		if err != nil || !hb.After(since) {
			return fmt.Errorf("last heartbeat %q", s)
		}
		return nil
	})
}
