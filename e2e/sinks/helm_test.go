package sinks

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/testenv"
)

// helmPassword is installed as a value of the release; it must reach no row, log or status.
const helmPassword = "hunter2-never-exported"

// TestHelmReleasesThroughTheShippedAgent is issue 23 part 3: the real helm CLI installs a tiny
// chart (testdata/helm/demo) into the test API server and upgrades it, so Helm itself writes
// release Secrets of two revisions; the shipped kollect-agent applies the profile, target and
// inventory of docs/examples/helm-releases.yaml and PostgreSQL (read with psql) holds one row
// per release, from its latest revision, with the values' keys and every value redacted. A
// release Secret that does not decode is an extraction error naming the Secret, not its data.
//
// KOLLECT_HELM_FIXTURE=path writes the upgraded release's Secret there, as helm wrote it: the
// decoder's unit test fixture (agent/internal/helmrelease/testdata) is made that way.
func TestHelmReleasesThroughTheShippedAgent(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	helm, err := testenv.Tool("helm")
	must(t, err)
	cp, pgURL, _ := postgresCluster(t, ctx, "helm")
	c := cp.Client
	const appNS = "helm-apps"
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: appNS}}))
	chart, err := filepath.Abs("testdata/helm/demo")
	must(t, err)
	runHelm := func(args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, helm, append(args, "--kubeconfig", cp.Kubeconfig, "--namespace", appNS)...)
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	runHelm("install", "demo", chart, "--set", "database.password="+helmPassword)
	runHelm("upgrade", "demo", chart, "--reuse-values", "--set", "image.tag=2.0", "--description", "tag 2.0")
	runHelm("install", "cache", chart)
	var secrets corev1.SecretList
	must(t, c.List(ctx, &secrets, client.InNamespace(appNS)))
	var names []string
	for _, s := range secrets.Items {
		names = append(names, s.Name+"("+string(s.Type)+")")
		if path := os.Getenv("KOLLECT_HELM_FIXTURE"); path != "" && s.Name == "sh.helm.release.v1.demo.v2" {
			writeSecretFixture(t, &s, path)
		}
	}
	if want := "sh.helm.release.v1.cache.v1(helm.sh/release.v1) sh.helm.release.v1.demo.v1(helm.sh/release.v1) " +
		"sh.helm.release.v1.demo.v2(helm.sh/release.v1)"; strings.Join(names, " ") != want {
		t.Fatalf("helm wrote Secrets %v, want %s", names, want)
	}
	// A release Secret that is not what Helm writes, and an Opaque Secret the watch must not see.
	must(t, c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: appNS, Name: "sh.helm.release.v1.broken.v1"},
		Type: "helm.sh/release.v1", Data: map[string][]byte{"release": []byte("bm90LWd6aXA6" + helmPassword)}}))
	must(t, c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: appNS, Name: "opaque"},
		StringData: map[string]string{"token": helmPassword}}))

	// The documented example, with the test's sink.
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kollect-system"}}))
	for _, obj := range exampleObjects(t, "../../docs/examples/helm-releases.yaml") {
		if obj.GetKind() == "KollectClusterInventory" {
			must(t, unstructured.SetNestedSlice(obj.Object, []any{map[string]any{"name": "postgres", "namespace": sinkNS}}, "spec", "sinks", "database"))
			must(t, unstructured.SetNestedField(obj.Object, "1s", "spec", "debounce"))
		}
		must(t, c.Create(ctx, obj))
	}
	a := newAgent(t, cp)
	a.start()

	db := &pgReader{url: pgURL}
	rows := func() string {
		out, err := db.psql(ctx, `SELECT string_agg(concat_ws(' ', namespace || '/' || name, kind, attributes->>'chart',
			attributes->>'version', attributes->>'appVersion', attributes->>'status', 'revision=' || (attributes->>'revision'),
			attributes->>'updated', 'values=' || (attributes->'values')::text), E'\n' ORDER BY name)
			FROM kollect.rows WHERE inventory = 'helm-releases'`)
		if err != nil {
			return err.Error() // the sink creates its table on its first export
		}
		return strings.TrimSpace(out)
	}
	updated := func(release string) string {
		out, err := exec.CommandContext(ctx, helm, "status", release, "-o", "json", "--kubeconfig", cp.Kubeconfig, "--namespace", appNS).Output()
		must(t, err)
		var st struct {
			Info struct {
				LastDeployed time.Time `json:"last_deployed"`
			} `json:"info"`
		}
		must(t, json.Unmarshal(out, &st))
		return st.Info.LastDeployed.UTC().Format(time.RFC3339)
	}
	// psql prints jsonb with its own key order (shorter keys first).
	want := fmt.Sprintf(`%[1]s/cache Secret demo 0.1.0 1.0.0 deployed revision=1 %[2]s values={}
%[1]s/demo Secret demo 0.1.0 1.0.0 deployed revision=2 %[3]s values={"image": {"tag": "<redacted>"}, "database": {"password": "<redacted>"}}`,
		appNS, updated("cache"), updated("demo"))
	eventuallyT(t, 90*time.Second, "one row per release in PostgreSQL", func() (bool, string) {
		got := rows()
		return got == want, got
	})
	t.Logf("rows in PostgreSQL (psql):\n%s", want)

	// An upgrade updates the release's row in place (its UID is the release's, not the
	// Secret's), and an uninstalled release's row is deleted.
	uid := func(name string) string {
		out, err := db.psql(ctx, `SELECT uid FROM kollect.rows WHERE inventory = 'helm-releases' AND name = '`+name+`'`)
		must(t, err)
		return strings.TrimSpace(out)
	}
	demoUID := uid("demo")
	runHelm("upgrade", "demo", chart, "--reuse-values", "--set", "replicas=3")
	runHelm("uninstall", "cache")
	want = fmt.Sprintf(`%[1]s/demo Secret demo 0.1.0 1.0.0 deployed revision=3 %[2]s values={"image": {"tag": "<redacted>"}, "database": {"password": "<redacted>"}, "replicas": "<redacted>"}`,
		appNS, updated("demo"))
	eventuallyT(t, 90*time.Second, "the upgrade and the uninstall in PostgreSQL", func() (bool, string) {
		got := rows()
		return got == want, got
	})
	if got := uid("demo"); got != demoUID || demoUID == "" {
		t.Errorf("the upgrade changed the release's row UID %q -> %q", demoUID, got)
	}
	t.Logf("after helm upgrade and uninstall (psql):\n%s", want)

	// The broken Secret: one extraction error in the coverage, named in the target's status.
	out, err := db.psql(ctx, `SELECT state || ' rows=' || rows || ' errors=' || extraction_errors FROM kollect.rows_coverage
		WHERE inventory = 'helm-releases' AND target = 'helm-releases'`)
	must(t, err)
	if got := strings.TrimSpace(out); got != "complete rows=1 errors=1" {
		t.Errorf("coverage of helm-releases: %q, want complete rows=1 errors=1", got)
	}
	var status string
	eventuallyT(t, 30*time.Second, "the target's status names the broken Secret", func() (bool, string) {
		tgt := &unstructured.Unstructured{}
		tgt.SetAPIVersion("kollect.dev/v1alpha1")
		tgt.SetKind("KollectClusterTarget")
		must(t, c.Get(ctx, client.ObjectKey{Name: "helm-releases"}, tgt))
		raw, _ := json.Marshal(tgt.Object["status"])
		status = string(raw)
		// Two objects: demo's latest revision and the broken Secret (a release of its own).
		return strings.Contains(status, appNS+"/sh.helm.release.v1.broken.v1: decoding Helm release: ") &&
			strings.Contains(status, `"objectCount":2,`), status
	})
	t.Logf("target status: %s", status)

	// The password and the broken Secret's data are nowhere: rows, coverage, status, log.
	dump, err := db.psql(ctx, `SELECT (SELECT string_agg(r::text, ' ') FROM kollect.rows r) || (SELECT string_agg(c::text, ' ') FROM kollect.rows_coverage c)`)
	must(t, err)
	log, err := os.ReadFile(a.log)
	must(t, err)
	for where, text := range map[string]string{"PostgreSQL": dump, "the target status": status, "the agent log": string(log)} {
		if strings.Contains(text, helmPassword) || strings.Contains(text, "bm90LWd6aXA6") {
			t.Errorf("%s holds a Secret's content", where)
		}
	}
	// Only release Secrets were listed: the server-side field selector.
	if !strings.Contains(string(log), `"fieldSelector":"type=helm.sh/release.v1"`) {
		t.Errorf("the agent did not watch Secrets with fieldSelector type=helm.sh/release.v1:\n%s", grepLines(string(log), "started watch"))
	}
}

// exampleObjects decodes every document of a documentation example.
func exampleObjects(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	f, err := os.Open(path)
	must(t, err)
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			return out
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// writeSecretFixture writes a release Secret as the API serves it (data base64), without the
// server-set metadata that changes every run.
func writeSecretFixture(t *testing.T, s *corev1.Secret, path string) {
	t.Helper()
	fixture := map[string]any{"apiVersion": "v1", "kind": "Secret", "type": string(s.Type),
		"metadata": map[string]any{"name": s.Name, "namespace": s.Namespace, "labels": s.Labels}, "data": s.Data}
	raw, err := json.MarshalIndent(fixture, "", "  ")
	must(t, err)
	must(t, os.WriteFile(path, append(raw, '\n'), 0o644))
}

func grepLines(text, substr string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
