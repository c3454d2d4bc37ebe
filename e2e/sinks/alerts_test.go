package sinks

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"kollect.dev/testenv"
)

// staleAfter is the alerts' threshold here: three confirm intervals, as the documented 900 s
// are three default ones.
const staleAfter = 3 * confirmEvery

// agentJob and agentNamespace are what the chart's rules select: the metrics Service's job and
// the release namespace.
const (
	agentJob       = "kollect-agent-metrics"
	agentNamespace = "kollect-system"
)

// docAlert is one alert expression the docs show, named for the rule file.
type docAlert struct{ name, file, expr string }

// documentedAlerts reads the alert expressions of docs/operations.md (the fenced blocks of the
// Metrics section that use the export timestamps) and docs/hub.md (its "Example alert"), with
// their thresholds scaled from the documented 900 s and 3600 s to staleAfter.
func documentedAlerts(t *testing.T) []docAlert {
	t.Helper()
	root, err := testenv.RepoRoot()
	must(t, err)
	read := func(name string) string {
		raw, err := os.ReadFile(filepath.Join(root, "docs", name))
		must(t, err)
		return string(raw)
	}
	scale := func(file, expr string) string {
		out := regexp.MustCompile(`> (900|3600)\b`).ReplaceAllString(expr, fmt.Sprintf("> %d", int(staleAfter.Seconds())))
		if out == expr {
			t.Fatalf("docs/%s: the alert %q has no 900 s or 3600 s threshold to scale", file, expr)
		}
		return out
	}
	var alerts []docAlert
	ops := read("operations.md")
	for i, m := range regexp.MustCompile("(?s)```\n(time\\(\\) - kollect_export_[^`]*)```").FindAllStringSubmatch(ops, -1) {
		alerts = append(alerts, docAlert{name: fmt.Sprintf("OperationsAlert%d", i+1), file: "operations.md", expr: scale("operations.md", strings.TrimSpace(m[1]))})
	}
	if len(alerts) != 2 {
		t.Fatalf("docs/operations.md shows %d staleness alerts, want the confirmation one and the confirmations-off one", len(alerts))
	}
	m := regexp.MustCompile("Example alert: `([^`]+)`").FindStringSubmatch(read("hub.md"))
	if m == nil {
		t.Fatal("docs/hub.md has no example alert")
	}
	return append(alerts, docAlert{name: "HubLagAlert", file: "hub.md", expr: scale("hub.md", m[1])})
}

// chartRules renders the agent chart's PrometheusRule with the thresholds scaled to this test
// and returns it as a Prometheus rule file.
func chartRules(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	must(t, err)
	helm, err := testenv.Tool("helm")
	must(t, err)
	home := t.TempDir()
	cmd := exec.Command(helm, "template", "kollect", filepath.Join(root, "charts", "agent"), "--namespace", agentNamespace,
		"--show-only", "templates/metrics.yaml", "--set", "clusterName=quiet", "--set", "metrics.prometheusRule.enabled=true",
		"--set", fmt.Sprintf("metrics.prometheusRule.staleAfterSeconds=%d", int(staleAfter.Seconds())),
		"--set", "metrics.prometheusRule.staleFor=0s")
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderrOf(err))
	}
	for _, doc := range strings.Split(string(out), "\n---") {
		var obj struct {
			Kind string
			Spec map[string]any
		}
		must(t, yaml.Unmarshal([]byte(doc), &obj))
		if obj.Kind == "PrometheusRule" {
			raw, err := yaml.Marshal(obj.Spec)
			must(t, err)
			return string(raw)
		}
	}
	t.Fatalf("the agent chart rendered no PrometheusRule:\n%s", out)
	return ""
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// startAlertPrometheus starts a Prometheus that scrapes the agent (as the chart's Service would
// be scraped) and the hub (with its CA and a token) every second and evaluates the chart's
// rules and the documented alerts every second.
func startAlertPrometheus(t *testing.T, a *agentProc, hub *hubProc, docs []docAlert) *testenv.Prometheus {
	t.Helper()
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: documented\n    rules:\n")
	for _, d := range docs {
		fmt.Fprintf(&rules, "      - alert: %s\n        expr: %q\n", d.name, d.expr)
	}
	config := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [chart.yml, documented.yml]
scrape_configs:
  - job_name: %s
    static_configs: [{targets: [%q], labels: {namespace: %s}}]
  - job_name: kollect-hub
    scheme: https
    tls_config: {ca_file: %q, server_name: localhost}
    authorization: {credentials: %q}
    static_configs: [{targets: [%q]}]
`, agentJob, a.metrics, agentNamespace, filepath.Join(hub.dataPath, "pki", "ca.crt"), hub.adminToken, hub.addr)
	prom, err := testenv.StartPrometheus(config, map[string]string{"chart.yml": chartRules(t), "documented.yml": rules.String()})
	must(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("prometheus log (tail):\n%s", lastLines(prom.Log(), 20))
		}
		prom.Stop()
	})
	return prom
}

// ruleStates reads every loaded rule's health and last evaluation, by alert name.
func ruleStates(ctx context.Context, prom *testenv.Prometheus) (map[string]ruleState, error) {
	var data struct {
		Groups []struct{ Rules []ruleState }
	}
	if err := prom.API(ctx, "/api/v1/rules", nil, &data); err != nil {
		return nil, err
	}
	out := map[string]ruleState{}
	for _, g := range data.Groups {
		for _, r := range g.Rules {
			out[r.Name] = r
		}
	}
	return out, nil
}

type ruleState struct {
	Name, Health, LastError, State string
	LastEvaluation                 time.Time
}

// assertAlertsQuiet: over the window since from, every rule was evaluated without error and
// none was ever pending or firing (Prometheus's own ALERTS series), and the documented
// expressions measure something: with the threshold at 0 each one the quiet agent can match
// returns series.
func assertAlertsQuiet(t *testing.T, ctx context.Context, prom *testenv.Prometheus, docs []docAlert, from time.Time) {
	t.Helper()
	states, err := ruleStates(ctx, prom)
	must(t, err)
	for _, name := range append([]string{"KollectExportStale", "KollectExportErrors", "KollectAgentDown"}, docNames(docs)...) {
		r, ok := states[name]
		switch {
		case !ok:
			t.Errorf("rule %s is not loaded: %v", name, states)
		case r.Health != "ok" || r.LastError != "":
			t.Errorf("rule %s: health %s: %s", name, r.Health, r.LastError)
		case !r.LastEvaluation.After(from):
			t.Errorf("rule %s was last evaluated at %s, before the quiet window began at %s", name, r.LastEvaluation, from)
		}
	}
	window := max(time.Since(from).Round(time.Second), time.Second)
	active, err := prom.Query(ctx, fmt.Sprintf("max_over_time(ALERTS[%s])", window))
	must(t, err)
	for _, s := range active {
		if s.Metric["alertname"] != "KollectAgentDown" || s.Metric["alertstate"] != "pending" {
			t.Errorf("alert %s was %s during %s of quiet: %v", s.Metric["alertname"], s.Metric["alertstate"], window, s.Metric)
		}
	}
	for _, d := range docs {
		if strings.Contains(d.expr, "== 0") {
			continue // the confirmations-off form: this inventory confirms
		}
		probe := regexp.MustCompile(`> \d+`).ReplaceAllString(d.expr, "> 0")
		got, err := prom.Query(ctx, probe)
		must(t, err)
		if len(got) == 0 {
			t.Errorf("docs/%s: %q matches no series of the running agent and hub, so its alert could never fire", d.file, probe)
		}
	}
}

func docNames(docs []docAlert) []string {
	names := make([]string, len(docs))
	for i, d := range docs {
		names[i] = d.name
	}
	return names
}

// waitAlertsFiring waits until each named alert is firing.
func waitAlertsFiring(t *testing.T, ctx context.Context, prom *testenv.Prometheus, within time.Duration, names ...string) {
	t.Helper()
	var firing map[string]bool
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(time.Second) {
		var data struct {
			Alerts []struct {
				Labels map[string]string
				State  string
			}
		}
		must(t, prom.API(ctx, "/api/v1/alerts", nil, &data))
		firing = map[string]bool{}
		for _, a := range data.Alerts {
			if a.State == "firing" {
				firing[a.Labels["alertname"]] = true
			}
		}
		missing := false
		for _, n := range names {
			missing = missing || !firing[n]
		}
		if !missing {
			return
		}
	}
	t.Fatalf("after %s, firing alerts are %v; want all of %v", within, firing, names)
}
