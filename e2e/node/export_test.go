package node

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"kollect.dev/e2e/internal/grant"
	"kollect.dev/testenv"
)

// postgresExample is docs/examples/database-postgres.yaml with the edits its page tells a user
// to make: the server's address and database, and (this server has no TLS) sslMode disable
// without the CA Secret, which needs the KollectClusterScope grant to namespace ns that
// docs/sinks/postgres.md shows.
func (e *env) postgresExample(t *testing.T, database, ns string) string {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "docs", "examples", "database-postgres.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	dec := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	for {
		doc, err := dec.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var u unstructured.Unstructured
		if err := yaml.Unmarshal(doc, &u.Object); err != nil || u.Object == nil {
			continue
		}
		switch {
		case u.GetKind() == "Secret" && u.GetName() == "pg-ca":
			continue
		case u.GetKind() == "KollectDatabaseSink":
			pg := u.Object["spec"].(map[string]any)["postgres"].(map[string]any)
			pg["host"] = e.cluster.HostIP
			pg["port"] = int64(e.pg.Port)
			pg["database"] = database
			pg["sslMode"] = "disable"
			delete(pg, "tls")
		}
		b, err := yaml.Marshal(u.Object)
		if err != nil {
			t.Fatal(err)
		}
		out.WriteString("---\n")
		out.Write(b)
	}
	out.WriteString("---\n" + grant.Unverified("unverified-"+ns, ns))
	return out.String()
}

// rows counts the node-1 Deployment rows named name in the shared table, with psql; before
// the first export the table does not exist, which is an error to wait out.
func (e *env) rows(url, name string) (int, error) {
	out, err := exec.Command("psql", url, "-tAc", fmt.Sprintf(
		"SELECT count(*) FROM kollect.rows_latest WHERE cluster = 'node-1' AND kind = 'Deployment' AND namespace = 'team-a' AND name = '%s'", name)).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("psql: %v: %s", err, out)
	}
	return strconv.Atoi(strings.TrimSpace(string(out)))
}

// waitRow waits until the shared table holds the row of Deployment name.
func (e *env) waitRow(ctx context.Context, t *testing.T, url, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	defer e.diagnoseOnFailure(t)
	eventually(ctx, t, "the row of Deployment "+name+" in PostgreSQL", func() error {
		n, err := e.rows(url, name)
		if err == nil && n != 1 {
			err = fmt.Errorf("%d rows", n)
		}
		return err
	})
}

func (e *env) exportAndFailOver(ctx context.Context, t *testing.T) {
	url, err := e.pg.CreateDatabase(ctx, "inventory")
	if err != nil {
		t.Fatal(err)
	}
	// The role the example's Secret names, owning the database so that it may create the
	// schema (docs/sinks/postgres.md gives narrower grants).
	run(t, "psql", e.pg.URL, "-v", "ON_ERROR_STOP=1", "-qc",
		"CREATE ROLE kollect_agent LOGIN PASSWORD 'change-me'; ALTER DATABASE inventory OWNER TO kollect_agent")
	out, err := e.kubectlErr(e.postgresExample(t, "inventory", "team-a"), "apply", "-n", "team-a", "-f", "-")
	if err != nil {
		t.Fatalf("applying docs/examples/database-postgres.yaml: %v\n%s", err, out)
	}
	e.kubectlRun(t, "create", "deployment", "web", "-n", "team-a", "--image=registry.invalid/web:1", "--replicas=0")
	e.waitRow(ctx, t, url, "web")

	// The leader pod goes; the standby takes the Lease and exports the next change.
	old := e.leader(ctx, t)
	deleted := time.Now()
	e.kubectlRun(t, "delete", "pod", "-n", "kollect-system", old, "--wait=false")
	e.kubectlRun(t, "create", "deployment", "after-failover", "-n", "team-a", "--image=registry.invalid/web:1", "--replicas=0")
	e.waitRow(ctx, t, url, "after-failover")
	t.Logf("failover: the row exported %v after the leader pod's deletion", time.Since(deleted).Round(100*time.Millisecond))
	if now := e.leader(ctx, t); now == old {
		t.Errorf("the deleted pod %s still holds the Lease", old)
	}
}

func (e *env) upgradeAndUninstall(ctx context.Context, t *testing.T) {
	e.helmRun(t, "upgrade", "kollect-agent", chart(t, "agent"), "-n", "kollect-system", "--reuse-values",
		"--set", "logLevel=debug", "--wait", "--timeout", "4m")
	for _, p := range e.readyPods(ctx, t, "kollect-system", "app.kubernetes.io/name=kollect-agent", 2) {
		if !strings.Contains(strings.Join(p.Spec.Containers[0].Args, " "), "--zap-log-level=debug") {
			t.Errorf("upgraded pod %s runs without --zap-log-level=debug", p.Name)
		}
	}

	e.helmRun(t, "uninstall", "kollect-agent", "-n", "kollect-system", "--wait")
	e.helmRun(t, "uninstall", "kollect-hub", "-n", "kollect-hub", "--wait")
	// What the charts' READMEs say stays: the CRDs (and so the Kollect objects) and the hub's
	// claim; nothing else of either release.
	e.kubectlRun(t, "get", "crd", "kollectprofiles.kollect.dev")
	e.kubectlRun(t, "get", "kollectprofile", "-n", "team-a", "pg-workloads")
	e.kubectlRun(t, "get", "pvc", "-n", "kollect-hub", "kollect-hub")
	for _, q := range [][]string{
		{"get", "deployment,service,serviceaccount,lease", "-n", "kollect-system", "-o", "name"},
		{"get", "validatingwebhookconfiguration", "-o", "name"},
		{"get", "deployment,service", "-n", "kollect-hub", "-o", "name"},
	} {
		if out := strings.TrimSpace(e.kubectlRun(t, q...)); out != "" && !notTheCharts(out) {
			t.Errorf("kubectl %s after helm uninstall:\n%s", strings.Join(q, " "), out)
		}
	}
}

// notTheCharts: what is left is not a chart's object. The Lease is the leader election's (it
// outlives the release like any Lease controller-runtime makes); the namespace's default
// ServiceAccount is the cluster's.
func notTheCharts(out string) bool {
	for _, l := range strings.Split(out, "\n") {
		if l != "serviceaccount/default" && l != "lease.coordination.k8s.io/kollect-agent" {
			return false
		}
	}
	return true
}

// diagnoseOnFailure logs what the agents say of themselves when the test failed: their
// objects' status and the last lines of each pod's log.
func (e *env) diagnoseOnFailure(t *testing.T) {
	if !t.Failed() {
		return
	}
	out, _ := e.kubectlErr("", "get", "kollect", "-A", "-o", "yaml")
	t.Logf("Kollect objects:\n%s", out)
	out, _ = e.kubectlErr("", "logs", "-n", "kollect-system", "-l", "app.kubernetes.io/name=kollect-agent", "--tail=60", "--prefix")
	t.Logf("agent logs:\n%s", out)
}
