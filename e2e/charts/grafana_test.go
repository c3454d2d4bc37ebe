package charts

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/testenv"
)

// dashboard is the part of a Grafana dashboard model these tests read.
type dashboard struct {
	UID, Title string
	Templating struct{ List []dashVariable }
	Panels     []dashPanel
}

type dashVariable struct {
	Name, Type string
	Query      any // a string, or {"query": "..."} in newer Grafana versions
	Datasource *dashDatasource
}

type dashDatasource struct{ Type, UID string }

type dashPanel struct {
	ID         int
	Type       string
	Title      string
	Datasource *dashDatasource
	Targets    []struct {
		RefID      string `json:"refId"`
		Expr       string
		Datasource *dashDatasource
	}
	Panels []dashPanel // a collapsed row carries its panels
}

// panelQuery is one target of one panel.
type panelQuery struct{ panel, refID, expr string }

func (q panelQuery) String() string { return fmt.Sprintf("panel %q (%s)", q.panel, q.refID) }

// queries lists every target of every panel, those of collapsed rows included.
func (d dashboard) queries() []panelQuery {
	var out []panelQuery
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out = append(out, panelQuery{panel: p.Title, refID: tg.RefID, expr: tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// dashboardFile is the chart's dashboard JSON, which its ConfigMap carries under the same name.
func dashboardFile(chart string) string { return "kollect-" + chart + ".json" }

// checkDashboardConfigMap checks a render with grafana.dashboards enabled: one ConfigMap, in ns,
// with the sidecar labels and the annotations asked for, holding the chart's dashboard file
// unchanged as valid dashboard JSON whose panels all query the data source variable.
func checkDashboardConfigMap(chart, ns string, labels, annotations map[string]string) func(*testing.T, []*unstructured.Unstructured) {
	return func(t *testing.T, objs []*unstructured.Unstructured) {
		t.Helper()
		cm := one(t, objs, "ConfigMap")
		if cm.GetNamespace() != ns {
			t.Errorf("dashboard ConfigMap in namespace %q, want %q", cm.GetNamespace(), ns)
		}
		for k, v := range labels {
			if got, ok := cm.GetLabels()[k]; !ok || got != v {
				t.Errorf("dashboard ConfigMap label %s=%q, want %q (labels %v)", k, got, v, cm.GetLabels())
			}
		}
		for k, v := range annotations {
			if got := cm.GetAnnotations()[k]; got != v {
				t.Errorf("dashboard ConfigMap annotation %s=%q, want %q", k, got, v)
			}
		}
		data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
		want, err := os.ReadFile(filepath.Join(root, "charts", chart, "dashboards", dashboardFile(chart)))
		if err != nil {
			t.Fatal(err)
		}
		if len(data) != 1 || strings.TrimSpace(data[dashboardFile(chart)]) != strings.TrimSpace(string(want)) {
			t.Fatalf("the ConfigMap's data is not exactly charts/%s/dashboards/%s (keys %v)", chart, dashboardFile(chart), keys(data))
		}
		checkDashboardModel(t, chart, data[dashboardFile(chart)])
	}
}

// checkDashboardModel: the JSON parses, has a uid, a Prometheus data source variable that every
// panel, target and query variable uses, and only panels that query something.
func checkDashboardModel(t *testing.T, chart, raw string) dashboard {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal([]byte(raw), &d); err != nil {
		t.Fatalf("%s dashboard: %v", chart, err)
	}
	if d.UID != "kollect-"+chart || d.Title == "" {
		t.Errorf("%s dashboard: uid %q, title %q", chart, d.UID, d.Title)
	}
	usesVar := func(ds *dashDatasource) bool { return ds != nil && ds.UID == "${datasource}" }
	found := false
	for _, v := range d.Templating.List {
		switch {
		case v.Name == "datasource":
			found = v.Type == "datasource" && v.Query == "prometheus"
		case v.Type == "query" && !usesVar(v.Datasource):
			t.Errorf("%s dashboard: variable %s does not query ${datasource}", chart, v.Name)
		}
	}
	if !found {
		t.Errorf("%s dashboard: no datasource variable of type datasource for prometheus", chart)
	}
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			if p.Type != "row" && (len(p.Targets) == 0 || !usesVar(p.Datasource)) {
				t.Errorf("%s dashboard: panel %q has no targets or does not use ${datasource}", chart, p.Title)
			}
			for _, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" || (tg.Datasource != nil && !usesVar(tg.Datasource)) {
					t.Errorf("%s dashboard: panel %q target %s: empty expr or another data source", chart, p.Title, tg.RefID)
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return d
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestGrafanaDashboardConfigMaps: the dashboards are off by default (no ConfigMap), and on
// request land in the namespace asked for, with the labels and annotations asked for.
// (The enabled render cases, agent-grafana and hub-grafana, are also linted, validated and
// dry-run applied with every other case.)
func TestGrafanaDashboardConfigMaps(t *testing.T) {
	for _, chart := range []string{"agent", "hub"} {
		out, err := render(t, caseNamed(t, chart+"-default"))
		if err != nil {
			t.Fatal(err)
		}
		if cms := find(decode(t, out), "ConfigMap", ""); len(cms) != 0 {
			t.Errorf("%s chart: default values render %d ConfigMap(s), want none (dashboards are off by default)", chart, len(cms))
		}
		// helm upgrade --reuse-values from a release older than the grafana values renders
		// with no grafana key at all: off, not a failed upgrade.
		c := caseNamed(t, chart+"-default")
		c.values += "grafana: null\n"
		if out, err := render(t, c); err != nil {
			t.Errorf("%s chart: values without the grafana key (an upgrade reusing an older release's values): %v", chart, err)
		} else if cms := find(decode(t, out), "ConfigMap", ""); len(cms) != 0 {
			t.Errorf("%s chart: values without the grafana key render %d ConfigMap(s), want none", chart, len(cms))
		}
		c = caseNamed(t, chart+"-default")
		c.values += "grafana: {dashboards: {enabled: true, namespace: monitoring, labels: {team: platform}, annotations: {grafana_folder: Fleet}}}\n"
		out, err = render(t, c)
		if err != nil {
			t.Fatal(err)
		}
		// Maps merge with the defaults: the sidecar's label stays beside the one added.
		checkDashboardConfigMap(chart, "monitoring", map[string]string{"grafana_dashboard": "1", "team": "platform"},
			map[string]string{"grafana_folder": "Fleet"})(t, decode(t, out))
	}
}

// dashboardFixture is added to localConfig (agentrun_test.go) so that every documented agent
// series exists, as in e2e/metrics: a second inventory exports to a NATS stream (the event
// metrics) and to PostgreSQL on a port nothing listens on (the error counter, which has no
// series before a first error, and a failing sink in the hub's matrix).
const dashboardFixture = `---
apiVersion: v1
kind: Secret
metadata: {name: pg, namespace: kollect-system}
stringData: {username: kollect, password: x}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectEventSink
metadata: {name: bus, namespace: kollect-system}
spec:
  type: nats
  mode: changes
  bufferSize: 100
  nats: {servers: [%q], stream: KOLLECTDASHBOARDS, createStream: true, subjectTemplate: "kollect.{cluster}.{kind}"}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectDatabaseSink
metadata: {name: down, namespace: kollect-system}
spec:
  type: postgres
  timeout: 5s
  postgres: {host: 127.0.0.1, port: %d, database: postgres, table: rows, secretRef: {name: pg}}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectClusterInventory
metadata: {name: dashboards}
spec:
  targets: [{name: configmaps}]
  sinks:
    event: [{name: bus, namespace: kollect-system}]
    database: [{name: down, namespace: kollect-system}]
  debounce: 1s
  maxDelay: 5s
`

// TestGrafanaDashboardQueries runs every query of both charts' dashboards against a real
// Prometheus (Debian's) that scrapes the shipped kollect-agent (the agent chart's arguments,
// registered with a real kollect-hub, exporting to git, NATS and an unreachable PostgreSQL) and
// that hub, as the charts' ServiceMonitors would: the agent over TLS with a ServiceAccount
// token bound to the chart's metrics-reader ClusterRole, the hub with an API token. A query
// fails the test, naming its panel, when Prometheus refuses it, when it returns no series, or
// when it names a metric the scraped binary does not serve; and every metric a dashboard names
// must be documented in the Metrics section of docs/operations.md or in docs/hub.md.
func TestGrafanaDashboardQueries(t *testing.T) {
	t.Parallel() // its own control plane, servers and ports
	ctx := context.Background()
	agentCase := caseNamed(t, "agent-hub") // registers with a hub and allows local sinks
	agentCase.values += "grafana: {dashboards: {enabled: true}}\n"
	agentOut, err := render(t, agentCase)
	if err != nil {
		t.Fatal(err)
	}
	hubOut, err := render(t, caseNamed(t, "hub-grafana"))
	if err != nil {
		t.Fatal(err)
	}
	agentObjs, hubObjs := decode(t, agentOut), decode(t, hubOut)
	dashboards := map[string]dashboard{}
	for chart, objs := range map[string][]*unstructured.Unstructured{"agent": agentObjs, "hub": hubObjs} {
		cm := one(t, objs, "ConfigMap")
		raw, _, _ := unstructured.NestedString(cm.Object, "data", dashboardFile(chart))
		dashboards[chart] = checkDashboardModel(t, chart, raw)
	}
	// The documentation check needs nothing running: fail before starting anything.
	documented := documentedMetricNames(t)
	for chart, d := range dashboards {
		for _, q := range d.queries() {
			names := metricNames(q.expr)
			if len(names) == 0 {
				t.Errorf("%s dashboard, %s: %q names no metric", chart, q, q.expr)
			}
			for _, n := range names {
				if !documented(n) {
					t.Errorf("%s dashboard, %s: metric %s is not documented in docs/operations.md or docs/hub.md", chart, q, n)
				}
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// The job labels the charts' ServiceMonitors give: the name of the Service they select.
	jobs := map[string]string{}
	for _, s := range find(agentObjs, "Service", "") {
		if strings.HasSuffix(s.GetName(), "-metrics") {
			jobs["agent"] = s.GetName()
		}
	}
	jobs["hub"] = one(t, hubObjs, "Service").GetName()

	cp, err := testenv.Start("grafana", testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	for _, ns := range []string{namespace, "team-a", "team-b"} {
		if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	nats, err := testenv.StartNATS(testenv.NATSOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nats.Stop)
	closed, err := testenv.FreePort() // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	repo, err := testenv.InitBareRepo(filepath.Join(dir, "repo.git"))
	if err != nil {
		t.Fatal(err)
	}
	assets, err := testenv.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(assets, "kubectl")
	cfgFile := filepath.Join(dir, "config.yaml")
	config := fmt.Sprintf(localConfig, repo) + fmt.Sprintf(dashboardFixture, nats.URL, closed)
	if err := os.WriteFile(cfgFile, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := run(root, kubectl, "--kubeconfig", cp.Kubeconfig, "apply", "-f", cfgFile); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}

	// The hub, and the agent registered with it. The agent runs with the administrator's
	// kubeconfig: the chart's RBAC is TestRenderValidateApply's business, the series are ours.
	hubURL, fingerprint, fleet := startLocalHub(t, dir)
	hubData := filepath.Join(dir, "hub-data") // where startLocalHub keeps the CA and admin token
	tok, err := fleet.CreateBootstrapToken(ctx, connect.NewRequest(&fleetv1.CreateBootstrapTokenRequest{
		Description: "grafana", Ttl: durationpb.New(time.Hour), MaxUses: 1}))
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "kollect-agent-hub-bootstrap"},
		StringData: map[string]string{"token": tok.Msg.GetSecret()}}); err != nil {
		t.Fatal(err)
	}
	agentArgs, metricsPort := chartAgentArgs(t, agentObjs, dir, hubURL, fingerprint)
	agent := start(t, "agent", binary(t, "kollect-agent"), []string{"KUBECONFIG=" + cp.Kubeconfig, "POD_NAMESPACE=" + namespace}, agentArgs...)
	waitFor(t, agent, 2*time.Minute, "an export to git", func() (bool, string) {
		out, _ := exec.Command("git", "--git-dir", repo, "show", "main:prod-eu-1/charts.yaml").CombinedOutput()
		return strings.Contains(string(out), "color: red"), string(out)
	})
	// The watch lag is observed on events after the initial list: change the object once.
	cm := &corev1.ConfigMap{}
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "red"}, cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["color"] = "blue"
	if err := cp.Client.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}

	// A scraper allowed by the chart's metrics-reader ClusterRole, as Prometheus's own
	// ServiceAccount would be: scrapeSecureMetrics binds it (and checks 401 and 403 first).
	for _, o := range agentObjs {
		if o.GetKind() == "ClusterRole" && strings.HasSuffix(o.GetName(), "-metrics-reader") {
			if err := cp.Client.Create(ctx, o.DeepCopy()); err != nil {
				t.Fatal(err)
			}
		}
	}
	scrapeSecureMetrics(t, cp, kubectl, agentObjs, metricsPort)
	scraperToken, err := run(root, kubectl, "--kubeconfig", cp.Kubeconfig, "create", "token", "scraper", "-n", namespace, "--duration", "1h")
	if err != nil {
		t.Fatal(err)
	}
	adminToken, err := os.ReadFile(filepath.Join(hubData, "admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	prom, err := testenv.StartPrometheus(fmt.Sprintf(`global: {scrape_interval: 1s}
scrape_configs:
  - job_name: %q
    scheme: https
    tls_config: {insecure_skip_verify: true}
    authorization: {credentials: %q}
    static_configs: [{targets: ["127.0.0.1:%d"], labels: {namespace: %s}}]
  - job_name: %q
    scheme: https
    tls_config: {ca_file: %q}
    authorization: {credentials: %q}
    static_configs: [{targets: [%q], labels: {namespace: %s}}]
`, jobs["agent"], strings.TrimSpace(scraperToken), metricsPort, namespace,
		jobs["hub"], filepath.Join(hubData, "pki", "ca.crt"), strings.TrimSpace(string(adminToken)), strings.TrimPrefix(hubURL, "https://"), namespace), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("prometheus log:\n%s", prom.Log())
		}
		prom.Stop()
	})

	// Poll until every query of both dashboards answers with series and names only served
	// metrics: series appear as the agent exports, fails, heartbeats and Prometheus gathers the
	// two samples a rate needs. A query Prometheus refuses fails at once.
	waitFor(t, agent, 3*time.Minute, "every dashboard query to return series of served metrics", func() (bool, string) {
		var problems []string
		for _, chart := range []string{"agent", "hub"} {
			problems = append(problems, dashboardProblems(t, ctx, prom, chart, dashboards[chart], jobs[chart])...)
		}
		return len(problems) == 0, "\n" + strings.Join(problems, "\n")
	})
	t.Logf("%d agent and %d hub dashboard queries return series of served, documented metrics",
		len(dashboards["agent"].queries()), len(dashboards["hub"].queries()))
}

// dashboardProblems evaluates a dashboard's variables and queries once and says what is
// wrong: a variable without values, a query without series, a metric the job does not serve.
func dashboardProblems(t *testing.T, ctx context.Context, prom *testenv.Prometheus, chart string, d dashboard, job string) []string {
	t.Helper()
	var problems []string
	// The label variables take the values this test's scrape jobs give, which their own
	// queries must offer; Grafana's interval variables take a minute.
	want := map[string]string{"namespace": namespace, "job": job}
	values := map[string]string{"__rate_interval": "1m", "__interval": "1m"}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(string)
		if m, ok := v.Query.(map[string]any); ok {
			q, _ = m["query"].(string)
		}
		m := regexp.MustCompile(`^label_values\((?:(.+),\s*)?([a-zA-Z_]+)\)$`).FindStringSubmatch(strings.TrimSpace(q))
		if m == nil || want[v.Name] == "" {
			t.Fatalf("%s dashboard: variable %s (%q) is not a label_values query this test knows a value for", chart, v.Name, q)
		}
		var offered []string
		match := url.Values{}
		if m[1] != "" {
			match.Set("match[]", substitute(m[1], values))
		}
		if err := prom.API(ctx, "/api/v1/label/"+m[2]+"/values", match, &offered); err != nil {
			t.Fatalf("%s dashboard: variable %s: %v", chart, v.Name, err)
		}
		if !slices.Contains(offered, want[v.Name]) {
			problems = append(problems, fmt.Sprintf("%s dashboard: variable %s offers %v, not %q", chart, v.Name, offered, want[v.Name]))
		}
		// As is: these values hold no regular-expression metacharacter to escape.
		values[v.Name] = want[v.Name]
	}
	// The metric names this job's targets serve (up included).
	var served []string
	if err := prom.API(ctx, "/api/v1/label/__name__/values", url.Values{"match[]": {fmt.Sprintf("{job=%q}", job)}}, &served); err != nil {
		t.Fatal(err)
	}
	for _, q := range d.queries() {
		expr := substitute(q.expr, values)
		if strings.Contains(expr, "$") {
			t.Fatalf("%s dashboard, %s: unknown variable left in %q", chart, q, expr)
		}
		for _, n := range metricNames(expr) {
			if !slices.Contains(served, n) {
				problems = append(problems, fmt.Sprintf("%s dashboard, %s: metric %s is not served by job %s", chart, q, n, job))
			}
		}
		got, err := prom.Query(ctx, expr)
		if err != nil {
			if strings.Contains(err.Error(), "bad_data") {
				t.Fatalf("%s dashboard, %s: Prometheus refuses %q: %v", chart, q, expr, err)
			}
			problems = append(problems, fmt.Sprintf("%s dashboard, %s: %v", chart, q, err))
		} else if len(got) == 0 {
			problems = append(problems, fmt.Sprintf("%s dashboard, %s: no series for %s", chart, q, expr))
		}
	}
	return problems
}

// substitute replaces Grafana variables ($name and ${name}), longest names first so that $job
// does not eat $jobs.
func substitute(expr string, values map[string]string) string {
	names := make([]string, 0, len(values))
	for n := range values {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return len(names[i]) > len(names[j]) })
	for _, n := range names {
		expr = strings.ReplaceAll(expr, "${"+n+"}", values[n])
		expr = strings.ReplaceAll(expr, "$"+n, values[n])
	}
	return expr
}

var (
	promString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	promMatchers = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	promGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	promKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true,
		"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
		"inf": true, "nan": true}
)

// metricNames returns the metric names a PromQL expression selects: identifiers left once
// strings, label matchers, ranges and grouping labels are removed, that are neither keywords
// nor function calls. (Enough for the dashboards' queries; no label names start them.)
func metricNames(expr string) []string {
	s := promString.ReplaceAllString(expr, " ")
	s = promMatchers.ReplaceAllString(s, " ")
	s = promGrouping.ReplaceAllString(s, " ")
	var out []string
	for _, loc := range promIdent.FindAllStringIndex(s, -1) {
		name := s[loc[0]:loc[1]]
		if loc[0] > 0 && (s[loc[0]-1] >= '0' && s[loc[0]-1] <= '9' || s[loc[0]-1] == '.') {
			continue // the exponent or unit of a number
		}
		if promKeywords[strings.ToLower(name)] || strings.HasPrefix(strings.TrimSpace(s[loc[1]:]), "(") {
			continue
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// documentedMetricNames returns whether a metric name is documented: written in backticks in
// the Metrics section of docs/operations.md or in docs/hub.md (whose metrics are described
// where their subject is), a histogram's series by the histogram's name.
func documentedMetricNames(t *testing.T) func(string) bool {
	t.Helper()
	names := map[string]bool{}
	for _, page := range []string{"operations.md", "hub.md"} {
		raw, err := os.ReadFile(filepath.Join(root, "docs", page))
		if err != nil {
			t.Fatal(err)
		}
		text := string(raw)
		if page == "operations.md" {
			_, section, ok := strings.Cut(text, "\n## Metrics\n")
			if !ok {
				t.Fatal("docs/operations.md has no Metrics section")
			}
			text, _, _ = strings.Cut(section, "\n## ")
		}
		for _, m := range regexp.MustCompile("`([a-zA-Z_:][a-zA-Z0-9_:]*)`").FindAllStringSubmatch(text, -1) {
			names[m[1]] = true
		}
	}
	return func(n string) bool {
		for _, suffix := range []string{"", "_bucket", "_count", "_sum"} {
			if base, ok := strings.CutSuffix(n, suffix); ok && names[base] {
				return true
			}
		}
		return false
	}
}
