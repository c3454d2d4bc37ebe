package charts

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// A fingerprint of the right shape; the charts only pass it on.
const fingerprint = "sha256:20ccfce4c7216715f5e9edf4a92de2d08650bdd0f6ec449b0eaed931e5689d2f"

// cases are the value combinations every test renders, validates and dry-run applies.
var cases = []renderCase{
	{name: "agent-default", chart: "agent", values: "clusterName: prod-eu-1\n",
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			if n := len(find(objs, "CustomResourceDefinition", "")); n != 10 {
				t.Errorf("want the 10 Kollect CRDs, got %d", n)
			}
			for _, crd := range find(objs, "CustomResourceDefinition", "") {
				if crd.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
					t.Errorf("CRD %s lacks helm.sh/resource-policy: keep", crd.GetName())
				}
			}
			hasArg(t, objs, "--cluster-name=prod-eu-1")
			hasArg(t, objs, "--leader-elect=true")
			hasArg(t, objs, "--cache-dir=/var/cache/kollect")
			hasArg(t, objs, "--webhook-port=9443")
			hasArg(t, objs, "--manage-webhook-certs=true")
			lacksArgPrefix(t, objs, "--hub-")
			lacksArgPrefix(t, objs, "--allow-local-sinks") // sinks may not reach the pod's own loopback
			hasArg(t, objs, "--tenant-mode=true")          // tenants confined by default
			lacksArgPrefix(t, objs, "--profile-cost-")
			vwc := one(t, objs, "ValidatingWebhookConfiguration")
			hooks, _, _ := unstructured.NestedSlice(vwc.Object, "webhooks")
			if len(hooks) != 10 {
				t.Errorf("want one webhook per Kollect kind (10), got %d", len(hooks))
			}
			// Secrets: only the release namespace, and never through a ClusterRole.
			for _, cr := range find(objs, "ClusterRole", "") {
				if strings.Contains(toJSON(cr.Object["rules"]), `"secrets"`) {
					t.Errorf("ClusterRole %s grants access to Secrets", cr.GetName())
				}
			}
			roles := find(objs, "Role", "kollect-agent-sink-secrets")
			if len(roles) != 1 || roles[0].GetNamespace() != namespace {
				t.Errorf("want one sink-secrets Role in %s, got %d", namespace, len(roles))
			}
			if len(find(objs, "PodDisruptionBudget", "")) != 0 {
				t.Error("a PodDisruptionBudget with one replica would block every drain")
			}
		}},
	{name: "agent-leader-election", chart: "agent", values: "clusterName: prod-eu-1\nreplicas: 3\nleaderElection: {enabled: true}\n",
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			d := one(t, objs, "Deployment")
			if r, _, _ := unstructured.NestedFieldNoCopy(d.Object, "spec", "replicas"); fmt.Sprint(r) != "3" {
				t.Errorf("replicas %v", r)
			}
			one(t, objs, "PodDisruptionBudget")
			if _, ok, _ := unstructured.NestedMap(d.Object, "spec", "template", "spec", "affinity", "podAntiAffinity"); !ok {
				t.Error("standbys are not spread over nodes")
			}
			if !strings.Contains(toJSON(find(objs, "Role", "kollect-agent")[0].Object["rules"]), "leases") {
				t.Error("no Lease access for leader election")
			}
		}},
	{name: "agent-hub", chart: "agent", values: `clusterName: prod-eu-1
clusterLabels: {env: prod, region: eu}
hub:
  url: https://hub.example.internal:443
  caFingerprint: ` + fingerprint + `
  bootstrapToken: {token: kbt_0123456789}
  namespaces: [team-a, team-b]
  createNamespaces: false # the teams' namespaces exist
  previewSamples: true
rbac:
  sinkNamespaces: [team-a, team-b]
allowLocalSinks: true # the agent this renders runs against a file:// repository (agentrun_test.go)
profileBudget: {rate: 2000000, burst: 50000000}
`, check: func(t *testing.T, objs []*unstructured.Unstructured) {
		hasArg(t, objs, "--allow-local-sinks")
		hasArg(t, objs, "--profile-cost-rate=2000000")
		hasArg(t, objs, "--profile-cost-burst=50000000")
		hasArg(t, objs, "--hub-url=https://hub.example.internal:443")
		hasArg(t, objs, "--hub-ca-fingerprint="+fingerprint)
		hasArg(t, objs, "--cluster-labels=env=prod,region=eu")
		hasArg(t, objs, "--hub-namespaces=team-a,team-b")
		hasArg(t, objs, "--hub-bootstrap-secret=kollect-agent-hub-bootstrap")
		hasArg(t, objs, "--preview-samples")
		s := find(objs, "Secret", "kollect-agent-hub-bootstrap")
		if len(s) != 1 || toJSON(s[0].Object["stringData"]) != `{"token":"kbt_0123456789"}` {
			t.Errorf("bootstrap Secret: %v", s)
		}
		if n := len(find(objs, "Role", "kollect-agent-sink-secrets")); n != 3 {
			t.Errorf("want sink-secrets Roles in team-a, team-b and %s, got %d", namespace, n)
		}
		// Namespaced Kollect kinds are writable only in the allowlist; scopes not at all.
		roles := find(objs, "Role", "kollect-agent-hub-apply")
		if n := len(roles); n != 2 {
			t.Errorf("want hub-apply Roles in team-a and team-b, got %d", n)
		}
		if n := len(find(objs, "Namespace", "")); n != 0 {
			t.Errorf("hub.createNamespaces false, yet %d Namespaces rendered", n)
		}
		for _, r := range append(roles, find(objs, "ClusterRole", "")...) {
			for _, res := range []string{"kollectscopes", "kollectclusterscopes"} {
				if grants(r, res, "create") {
					t.Errorf("%s %s lets the agent create %s without hub.allowScopes", r.GetKind(), r.GetName(), res)
				}
			}
		}
	}},
	{name: "agent-hub-allow-scopes", chart: "agent", values: `clusterName: prod-eu-1
hub:
  url: https://hub.example.internal:443
  caFingerprint: ` + fingerprint + `
  bootstrapToken: {token: kbt_0123456789}
  allowScopes: true
`, check: func(t *testing.T, objs []*unstructured.Unstructured) {
		hasArg(t, objs, "--hub-allow-scopes")
		// The default allowlist is one dedicated namespace, created and kept by the chart, where
		// the agent may write Kollect kinds and read (labelled) sink Secrets.
		hasArg(t, objs, "--hub-namespaces=kollect-fleet")
		if ns := one(t, objs, "Namespace"); ns.GetName() != "kollect-fleet" || ns.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
			t.Errorf("want Namespace kollect-fleet kept on uninstall, got %s %v", ns.GetName(), ns.GetAnnotations())
		}
		for _, name := range []string{"kollect-agent-hub-apply", "kollect-agent-sink-secrets"} {
			found := false
			for _, r := range find(objs, "Role", name) {
				found = found || r.GetNamespace() == "kollect-fleet"
			}
			if !found {
				t.Errorf("no Role %s in kollect-fleet", name)
			}
		}
		for _, r := range []string{"kollectscopes", "kollectclusterscopes"} {
			granted := false
			// KollectClusterScopes cluster-wide; KollectScopes where bundles land.
			for _, role := range append(find(objs, "ClusterRole", ""), find(objs, "Role", "kollect-agent-hub-apply")...) {
				granted = granted || grants(role, r, "create")
			}
			if !granted {
				t.Errorf("with hub.allowScopes the agent may not create %s", r)
			}
		}
	}},
	{name: "agent-networkpolicy", chart: "agent", values: `clusterName: prod-eu-1
hub:
  url: https://10.20.0.5:8443
  caFingerprint: ` + fingerprint + `
  bootstrapToken: {existingSecret: my-token}
networkPolicy:
  enabled: true
  apiServer: {cidrs: [10.0.0.1/32], ports: [443, 6443]}
  hub: {cidrs: [10.20.0.5/32], ports: [8443]}
  sinks:
    - {cidrs: [10.30.0.0/16], ports: [5432, {port: 4222, protocol: TCP}]}
  metricsFrom:
    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}
`, check: func(t *testing.T, objs []*unstructured.Unstructured) {
		np := one(t, objs, "NetworkPolicy")
		egress, _, _ := unstructured.NestedSlice(np.Object, "spec", "egress")
		if len(egress) != 4 { // DNS, API server, hub, one sink
			t.Errorf("want 4 egress rules, got %d: %s", len(egress), toJSON(egress))
		}
		if !strings.Contains(toJSON(egress), `"cidr":"10.20.0.5/32"`) || !strings.Contains(toJSON(egress), `"port":5432`) {
			t.Errorf("egress lacks the hub or a sink: %s", toJSON(egress))
		}
		hasArg(t, objs, "--hub-bootstrap-secret=my-token")
		lacksArgPrefix(t, objs, "--preview-samples") // previews carry counts only by default
		if len(find(objs, "Secret", "")) != 0 {
			t.Error("an existing bootstrap Secret must not be created")
		}
	}},
	{name: "agent-monitoring", chart: "agent", values: `clusterName: prod-eu-1
metrics:
  serviceMonitor: {enabled: true, labels: {release: prometheus}}
  prometheusRule: {enabled: true, staleAfterSeconds: 600}
`, check: func(t *testing.T, objs []*unstructured.Unstructured) {
		one(t, objs, "ServiceMonitor")
		rules := toJSON(one(t, objs, "PrometheusRule").Object["spec"])
		// kollect_export_errors_total is labelled by sink and class only: matching it on
		// inventory would never fire.
		for _, want := range []string{"KollectExportStale", "kollect_export_last_confirm_timestamp_seconds", "kollect_export_confirm_interval_seconds", "\\u003e 600", "and on (namespace, sink)\\n", "KollectExportErrors", "kollect_export_errors_total"} {
			if !strings.Contains(rules, want) {
				t.Errorf("PrometheusRule lacks %q: %s", want, rules)
			}
		}
	}},
	{name: "agent-cert-manager", chart: "agent", values: "clusterName: prod-eu-1\nwebhook: {certManager: {enabled: true}}\n",
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			one(t, objs, "Certificate")
			one(t, objs, "Issuer")
			hasArg(t, objs, "--manage-webhook-certs=false")
			if one(t, objs, "ValidatingWebhookConfiguration").GetAnnotations()["cert-manager.io/inject-ca-from"] != namespace+"/kollect-agent-webhook" {
				t.Error("the CA bundle is not injected by cert-manager")
			}
			for _, cr := range find(objs, "ClusterRole", "") {
				if strings.Contains(toJSON(cr.Object["rules"]), "validatingwebhookconfigurations") {
					t.Error("with cert-manager the agent must not patch its webhook configuration")
				}
			}
		}},
	{name: "agent-namespaced", chart: "agent", values: `clusterName: team-cluster
watchNamespaces: [team-a, team-b]
tenantMode: false
webhook: {enabled: false}
crds: {install: false}
hub:
  url: https://hub.example.internal
  caCert: |
    -----BEGIN CERTIFICATE-----
    MIIB
    -----END CERTIFICATE-----
  bootstrapToken: {existingSecret: boot}
`, check: func(t *testing.T, objs []*unstructured.Unstructured) {
		hasArg(t, objs, "--namespaces=team-a,team-b")
		hasArg(t, objs, "--tenant-mode=false") // the documented way to run open
		hasArg(t, objs, "--hub-ca-file=/etc/kollect/hub-ca/ca.crt")
		lacksArgPrefix(t, objs, "--webhook")
		if len(find(objs, "CustomResourceDefinition", "")) != 0 || len(find(objs, "ValidatingWebhookConfiguration", "")) != 0 {
			t.Error("CRDs or webhooks rendered although disabled")
		}
		if n := len(find(objs, "RoleBinding", "kollect-agent-watch")); n != 2 {
			t.Errorf("want watch RoleBindings in the two namespaces, got %d", n)
		}
		if len(find(objs, "ClusterRoleBinding", namespace+"-kollect-agent-watch")) != 0 {
			t.Error("watched resources granted cluster-wide despite watchNamespaces")
		}
		one(t, objs, "ConfigMap")
	}},
	{name: "agent-helm-releases", chart: "agent", values: "clusterName: prod-eu-1\nrbac: {helmReleases: true}\n",
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			// Read-only on Secrets, cluster-wide, in a ClusterRole of its own; nothing else changes.
			cr := find(objs, "ClusterRole", namespace+"-kollect-agent-helm-releases")
			if len(cr) != 1 || toJSON(cr[0].Object["rules"]) != `[{"apiGroups":[""],"resources":["secrets"],"verbs":["get","list","watch"]}]` {
				t.Fatalf("want one helm-releases ClusterRole reading Secrets, got %v", cr)
			}
			if len(find(objs, "ClusterRoleBinding", namespace+"-kollect-agent-helm-releases")) != 1 {
				t.Error("the helm-releases ClusterRole is not bound cluster-wide")
			}
			for _, other := range find(objs, "ClusterRole", "") {
				if other.GetName() != cr[0].GetName() && strings.Contains(toJSON(other.Object["rules"]), `"secrets"`) {
					t.Errorf("ClusterRole %s grants access to Secrets", other.GetName())
				}
			}
		}},
	{name: "agent-helm-releases-namespaced", chart: "agent", values: "clusterName: prod-eu-1\nwatchNamespaces: [team-a, team-b]\nrbac: {helmReleases: true}\n",
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			if n := len(find(objs, "RoleBinding", "kollect-agent-helm-releases")); n != 2 {
				t.Errorf("want helm-releases RoleBindings in the two namespaces, got %d", n)
			}
			if len(find(objs, "ClusterRoleBinding", namespace+"-kollect-agent-helm-releases")) != 0 {
				t.Error("Secrets readable cluster-wide despite watchNamespaces")
			}
		}},
	{name: "hub-default", chart: "hub", values: "",
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			d := one(t, objs, "Deployment")
			if s, _, _ := unstructured.NestedString(d.Object, "spec", "strategy", "type"); s != "Recreate" {
				t.Errorf("SQLite hub strategy %q, want Recreate", s)
			}
			pvc := one(t, objs, "PersistentVolumeClaim")
			if pvc.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
				t.Error("the data claim (CA, database) would be deleted on uninstall")
			}
			hasArg(t, objs, "--hosts=kollect-hub,kollect-hub.kollect-system,kollect-hub.kollect-system.svc,kollect-hub.kollect-system.svc.cluster.local")
			lacksArgPrefix(t, objs, "--store")
			lacksArgPrefix(t, objs, "--tls-cert")
			if len(find(objs, "PodDisruptionBudget", "")) != 0 {
				t.Error("a PodDisruptionBudget with one replica would block every drain")
			}
		}},
	{name: "hub-postgres-ha", chart: "hub", values: `replicas: 3
store: {type: postgres, postgres: {existingSecret: hub-store}}
tls: {existingSecret: hub-tls, hosts: [hub.example.internal]}
service: {type: NodePort, nodePort: 30443}
ingress: {enabled: true, className: nginx, host: hub.example.internal}
serviceMonitor: {enabled: true, bearerTokenSecret: {name: hub-metrics-token}}
`, check: func(t *testing.T, objs []*unstructured.Unstructured) {
		// /metrics needs a token: the ServiceMonitor sends the one in the named Secret.
		if sm := toJSON(one(t, objs, "ServiceMonitor").Object["spec"]); !strings.Contains(sm, `"credentials":{"key":"token","name":"hub-metrics-token"}`) {
			t.Errorf("ServiceMonitor does not send the metrics token: %s", sm)
		}
		d := one(t, objs, "Deployment")
		if s, _, _ := unstructured.NestedString(d.Object, "spec", "strategy", "type"); s != "RollingUpdate" {
			t.Errorf("postgres hub strategy %q, want RollingUpdate", s)
		}
		if len(find(objs, "PersistentVolumeClaim", "")) != 0 {
			t.Error("several replicas cannot share a ReadWriteOnce claim")
		}
		hasArg(t, objs, "--store=$(KOLLECT_HUB_STORE)")
		hasArg(t, objs, "--tls-cert=/etc/kollect-hub/tls/tls.crt")
		if !strings.Contains(toJSON(d.Object), `"secretKeyRef":{"key":"dsn","name":"hub-store"}`) {
			t.Error("the store URL does not come from the Secret")
		}
		one(t, objs, "Ingress")
		one(t, objs, "ServiceMonitor")
		checkHubHA(t, objs)
	}},
	{name: "hub-postgres-two", chart: "hub", values: `replicas: 2
store: {type: postgres, postgres: {existingSecret: hub-store}}
tls: {existingSecret: hub-tls}
podDisruptionBudget: {maxUnavailable: 1}
`, check: func(t *testing.T, objs []*unstructured.Unstructured) {
		if got := toJSON(one(t, objs, "PodDisruptionBudget").Object["spec"]); !strings.Contains(got, `"maxUnavailable":1`) || strings.Contains(got, "minAvailable") {
			t.Errorf("PodDisruptionBudget spec %s, want maxUnavailable 1 only", got)
		}
	}},
	{name: "agent-hub-replicas", chart: "agent", values: `clusterName: prod-eu-1
hub:
  url: [https://hub-0.example.internal:443, https://hub-1.example.internal:443]
  caFingerprint: ` + fingerprint + `
  bootstrapToken: {token: kbt_0123456789}
`, check: func(t *testing.T, objs []*unstructured.Unstructured) {
		// The agent fails over between the replicas: one flag, every URL.
		hasArg(t, objs, "--hub-url=https://hub-0.example.internal:443,https://hub-1.example.internal:443")
	}},
	{name: "hub-networkpolicy", chart: "hub", values: "", check: func(t *testing.T, objs []*unstructured.Unstructured) {
		// On by default: ingress only to the TLS port, egress only to DNS with SQLite.
		np := one(t, objs, "NetworkPolicy")
		ingress, _, _ := unstructured.NestedSlice(np.Object, "spec", "ingress")
		egress, _, _ := unstructured.NestedSlice(np.Object, "spec", "egress")
		if len(ingress) != 1 || !strings.Contains(toJSON(ingress), `"port":8443`) || strings.Contains(toJSON(ingress), `"from"`) {
			t.Errorf("ingress: %s, want the TLS port from any source", toJSON(ingress))
		}
		if len(egress) != 1 || !strings.Contains(toJSON(egress), `"port":53`) {
			t.Errorf("egress: %s, want DNS only", toJSON(egress))
		}
	}},
	{name: "hub-networkpolicy-postgres", chart: "hub", values: `replicas: 2
store: {type: postgres, postgres: {existingSecret: hub-store}}
tls: {existingSecret: hub-tls}
networkPolicy:
  store: {cidrs: [10.40.0.0/16], ports: [6432]}
  from: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: ingress-nginx}}}]
`, check: func(t *testing.T, objs []*unstructured.Unstructured) {
		np := one(t, objs, "NetworkPolicy")
		ingress, _, _ := unstructured.NestedSlice(np.Object, "spec", "ingress")
		egress, _, _ := unstructured.NestedSlice(np.Object, "spec", "egress")
		if !strings.Contains(toJSON(ingress), `"kubernetes.io/metadata.name":"ingress-nginx"`) {
			t.Errorf("ingress lacks the listed source: %s", toJSON(ingress))
		}
		if len(egress) != 2 || !strings.Contains(toJSON(egress), `"cidr":"10.40.0.0/16"`) || !strings.Contains(toJSON(egress), `"port":6432`) {
			t.Errorf("egress: %s, want DNS and the store", toJSON(egress))
		}
	}},
	// The Grafana dashboards (grafana_test.go checks their ConfigMaps and runs their queries).
	{name: "agent-grafana", chart: "agent", values: "clusterName: prod-eu-1\ngrafana: {dashboards: {enabled: true, annotations: {grafana_folder: Kollect}}}\n",
		check: checkDashboardConfigMap("agent", namespace, map[string]string{"grafana_dashboard": "1"}, map[string]string{"grafana_folder": "Kollect"})},
	{name: "hub-grafana", chart: "hub", values: "grafana: {dashboards: {enabled: true, labels: {grafana_dashboard: kollect}}}\n",
		check: checkDashboardConfigMap("hub", namespace, map[string]string{"grafana_dashboard": "kollect"}, nil)},
	{name: "hub-postgres-single", chart: "hub", values: "store: {type: postgres, postgres: {existingSecret: hub-store}}\n",
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			// One replica keeps its generated CA on the claim so the pinned fingerprint survives restarts.
			one(t, objs, "PersistentVolumeClaim")
		}},
}

// failures are values the charts must refuse, with the message a user needs.
var failures = []struct {
	chart, values, want string
}{
	{"agent", "", "clusterName is required"},
	{"agent", "clusterName: Prod_1\n", "must be a DNS label"},
	{"agent", "clusterName: a\nreplicas: 2\nleaderElection: {enabled: false}\n", "replicas > 1 needs leaderElection.enabled"},
	{"agent", "clusterName: a\nhub: {url: https://h, caFingerprint: " + fingerprint + "}\n", "hub.bootstrapToken"},
	{"agent", "clusterName: a\nhub: {url: http://h, caFingerprint: " + fingerprint + ", bootstrapToken: {token: x}}\n", "must start with https://"},
	{"agent", "clusterName: a\nhub: {url: https://h, caFingerprint: abc, bootstrapToken: {token: x}}\n", "sha256:<64"},
	{"agent", "clusterName: a\nnetworkPolicy: {enabled: true}\n", "networkPolicy.apiServer.cidrs"},
	{"agent", "clusterName: a\nhub: {url: https://h, caFingerprint: " + fingerprint + ", bootstrapToken: {token: x}, namespaces: [team-a, kollect-system]}\n",
		"hub.namespaces lists kollect-system, the release namespace"},
	{"hub", "replicas: 2\n", "needs store.type postgres"},
	{"hub", "replicas: 2\nstore: {type: sqlite}\n", "replicas > 1 needs store.type postgres: the SQLite store belongs to one hub"},
	{"agent", "clusterName: a\nhub: {url: [https://h, http://h2], caFingerprint: " + fingerprint + ", bootstrapToken: {token: x}}\n", "every URL of a list too"},
	{"hub", "store: {type: postgres}\n", "store.postgres.existingSecret"},
	{"hub", "replicas: 3\nstore: {type: postgres, postgres: {existingSecret: s}}\n", "tls.existingSecret"},
	{"hub", "store: {type: mysql}\n", "sqlite or postgres"},
	{"hub", "grafana: {dashboards: {enabled: true, labels: null}}\n", "grafana.dashboards.labels is empty"},
}

// checkHubHA: several hub replicas get a PodDisruptionBudget keeping one running, prefer
// distinct nodes, are ready only when their store answers (/readyz) and live on the process
// alone (/healthz), so a database outage takes them out of the Service without restarting them.
func checkHubHA(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	pdb := one(t, objs, "PodDisruptionBudget")
	if got := toJSON(pdb.Object["spec"]); !strings.Contains(got, `"minAvailable":1`) {
		t.Errorf("PodDisruptionBudget spec %s, want minAvailable 1", got)
	}
	d := toJSON(one(t, objs, "Deployment").Object)
	for _, want := range []string{`"podAntiAffinity"`, `"topologyKey":"kubernetes.io/hostname"`,
		`"readinessProbe":{"httpGet":{"path":"/readyz"`, `"livenessProbe":{"httpGet":{"path":"/healthz"`} {
		if !strings.Contains(d, want) {
			t.Errorf("the HA Deployment lacks %s", want)
		}
	}
}

// grants says whether a rendered (Cluster)Role has a rule allowing verb on resource.
func grants(role *unstructured.Unstructured, resource, verb string) bool {
	rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
	for _, r := range rules {
		rule, _ := r.(map[string]any)
		resources, _, _ := unstructured.NestedStringSlice(rule, "resources")
		verbs, _, _ := unstructured.NestedStringSlice(rule, "verbs")
		if slices.Contains(resources, resource) && slices.Contains(verbs, verb) {
			return true
		}
	}
	return false
}
