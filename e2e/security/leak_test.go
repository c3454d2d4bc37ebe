package security

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	kollectv1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

const (
	ns          = "sec"
	clusterName = "sec-cluster"
	bypassLabel = "kollect.test/bypass-webhook"
)

// webhookConfig sends the sink kinds to the agent's admission webhook (the paths it serves
// are /validate-kollect-dev-v1alpha1-<kind>), except objects labelled bypassLabel: those stand
// for objects that got in while no webhook ran, which the agent must refuse at reconcile.
func webhookConfig() *admissionregistrationv1.ValidatingWebhookConfiguration {
	fail, none := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "kollect-agent"}}
	for _, k := range kollectv1.Kinds {
		if !strings.HasSuffix(k.Kind, "Sink") {
			continue
		}
		path := "/validate-kollect-dev-v1alpha1-" + strings.ToLower(k.Kind)
		cfg.Webhooks = append(cfg.Webhooks, admissionregistrationv1.ValidatingWebhook{
			Name:                    strings.ToLower(k.Kind) + ".kollect.dev",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "kollect-system", Name: "kollect-agent-webhook", Path: &path}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
			ObjectSelector:          &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: bypassLabel, Operator: metav1.LabelSelectorOpDoesNotExist}}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{"kollect.dev"}, APIVersions: []string{"v1alpha1"},
					Resources: []string{k.Resource}},
			}},
		})
	}
	return cfg
}

func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func TestNoPlantedSecretOrRowLeaks(t *testing.T) {
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	secret := "planted-s3cr3t-" + randomHex()
	wrong := secret + "-wrong"
	rowValue := "planted-row-" + randomHex()
	// The secret is searched whole, by its random part alone (a truncated or partly masked
	// print still shows it) and base64-encoded (as a Secret's data is).
	secretPlants := []plant{{"secret", secret}, {"secret's random part", strings.TrimPrefix(secret, "planted-s3cr3t-")},
		{"secret in base64", base64.StdEncoding.EncodeToString([]byte(secret))}}
	rowPlant := plant{"row value", rowValue}

	// The control plane starts while the servers and the hub do (those fail the test, so they
	// start on the test's goroutine).
	var cp *testenv.ControlPlane
	var cpErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		cp, cpErr = testenv.Start("security", testenv.Options{WebhookInstallOptions: testenv.ValidatingWebhooks(webhookConfig())})
	})
	// Stopped however the test ends, also when a server fails to start meanwhile.
	t.Cleanup(func() {
		wg.Wait()
		if cp != nil {
			_ = cp.Stop()
		}
	})
	srv := startServers(t, secret)
	h := startHub(t)
	wg.Wait()
	if cpErr != nil {
		t.Fatal(cpErr)
	}
	c := cp.Client
	t.Logf("control plane, hub and 7 servers up after %s", time.Since(began).Round(time.Millisecond))

	// What an operator prepares: the namespaces and the hub's bootstrap token.
	for _, n := range []string{ns, "kollect-system"} {
		must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}))
	}
	// The platform team's grant, which the agent's default tenant mode requires.
	must(t, applyYAML(ctx, c, fmt.Sprintf(`apiVersion: kollect.dev/v1alpha1
kind: KollectScope
metadata: {name: platform-grant, namespace: %s}
spec:
  allowedKinds: [{group: "*", kind: "*"}]
  allowedNamespaces: [%s]
  allowedSinks: [{family: "*"}]
---
# The test PostgreSQL serves no TLS: sslMode disable needs allowInsecureSkipVerify.
apiVersion: kollect.dev/v1alpha1
kind: KollectClusterScope
metadata: {name: unverified-sinks}
spec:
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: %s}}
  allowedKinds: [{group: "*", kind: "*"}]
  allowedNamespaces: ["*"]
  allowedSinks: [{family: "*"}]
  allowInsecureSkipVerify: true
`, ns, ns, ns)))
	raw, err := h.call(ctx, "CreateBootstrapToken", map[string]any{"description": "e2e/security", "ttl": "3600s", "maxUses": 1})
	must(t, err)
	var tok struct{ Secret string }
	must(t, json.Unmarshal(raw, &tok))
	must(t, c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kollect-system", Name: "kollect-hub-bootstrap"},
		StringData: map[string]string{"token": tok.Secret}}))
	// The agent's own credential for the hub is a secret too: nothing may show it either.
	secretPlants = append(secretPlants, plant{"hub bootstrap token", tok.Secret})

	mport, err := testenv.FreePort()
	must(t, err)
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", mport)
	hport, err := testenv.FreePort()
	must(t, err)
	healthAddr := fmt.Sprintf("127.0.0.1:%d", hport)
	ws := cp.WebhookServing()
	cacheDir := t.TempDir()
	agent := startProc(t, "agent", bins.agent, []string{"KUBECONFIG=" + cp.Kubeconfig},
		"--cluster-name", clusterName, "--metrics-bind-address", metricsAddr, "--health-probe-bind-address", healthAddr,
		"--cache-dir", cacheDir, "--allow-local-sinks", "--zap-log-level=10",
		fmt.Sprintf("--webhook-port=%d", ws.Port), "--webhook-cert-dir", ws.CertDir, "--manage-webhook-certs=false",
		"--hub-url", "https://"+h.addr, "--hub-ca-fingerprint", h.pin, "--pod-namespace", "kollect-system", "--hub-namespaces", ns, "--cluster-labels", "leak=test")

	// The Kollect configuration: a ConfigMap profile that extracts the planted row value.
	must(t, applyYAML(ctx, c, fmt.Sprintf(`
apiVersion: v1
kind: ConfigMap
metadata: {name: owner, namespace: %[1]s}
data: {owner: %[2]s}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: configmaps, namespace: %[1]s}
spec:
  target: {version: v1, kind: ConfigMap}
  attributes: [{name: owner, jsonPath: "{.data.owner}", optional: true}]
---
apiVersion: kollect.dev/v1alpha1
kind: KollectTarget
metadata: {name: configmaps, namespace: %[1]s}
spec:
  profileRef: {name: configmaps}
  names: {include: [owner]}
`, ns, rowValue)))

	// The sinks: the good and the wrong credentials through Secrets, and the inline ones
	// refused by the webhook, then created past it.
	cases := sinkCases(srv, secret, wrong)
	var refusals []seen
	refs := map[string][]string{}
	waitWebhook(t, ctx, c)
	for _, sc := range cases {
		refs[sc.family] = append(refs[sc.family], "{name: "+sc.name+"}")
		if sc.secret != nil {
			must(t, c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sc.name}, StringData: sc.secret}))
		}
		if !sc.inline {
			must(t, applyYAML(ctx, c, sc.manifest(ns, false)))
			continue
		}
		err := applyYAML(ctx, c, sc.manifest(ns, false))
		if err == nil || !strings.Contains(err.Error(), "credentials in URLs are refused") {
			t.Errorf("the webhook admitted %s, with the secret in a URL (err %v)", sc.name, err)
			continue
		}
		refusals = append(refusals, seen{"the webhook's refusal of " + sc.name, err.Error()})
		must(t, applyYAML(ctx, c, sc.manifest(ns, true)))
	}
	must(t, applyYAML(ctx, c, fmt.Sprintf(`
apiVersion: kollect.dev/v1alpha1
kind: KollectInventory
metadata: {name: all, namespace: %s}
spec:
  targets: [{name: configmaps}]
  sinks: {snapshot: [%s], database: [%s], event: [%s]}
  debounce: 500ms
  maxDelay: 2s
`, ns, strings.Join(refs["snapshot"], ", "), strings.Join(refs["database"], ", "), strings.Join(refs["event"], ", "))))

	// Observable signs that every path ran with the planted values: each sink's probe came to
	// its verdict; the row reached PostgreSQL; exports to the wrong credentials failed (in the
	// inventory's status and in a Warning event); the heartbeat with those errors reached the hub.
	said := waitSinks(t, ctx, c, cases)
	for _, sc := range cases {
		msg := said[sc.name]
		for _, p := range secretPlants {
			msg = strings.ReplaceAll(msg, p.value, "<"+p.name+">")
		}
		t.Logf("%-18s %.220s", sc.name, msg)
	}
	// An edit that puts the secret into a URL is refused like a creation.
	var edited kollectv1.KollectSnapshotSink
	must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "git-good"}, &edited))
	edited.Spec.Git.URL = strings.Replace(edited.Spec.Git.URL, "http://", "http://"+gitUser+":"+secret+"@", 1)
	if err := c.Update(ctx, &edited); err == nil || !strings.Contains(err.Error(), "credentials in URLs are refused") {
		t.Errorf("the webhook admitted an edit of git-good putting the secret in its URL (err %v)", err)
	} else {
		refusals = append(refusals, seen{"the webhook's refusal of an edit of git-good", err.Error()})
	}
	waitFor(t, 60*time.Second, "the planted row in PostgreSQL (psql)", func() (bool, string) {
		out, err := exec.CommandContext(ctx, "psql", srv.pg.URL, "-Atc", "SELECT row_to_json(r)::text FROM kollect.rows r").CombinedOutput()
		return err == nil && strings.Contains(string(out), rowValue), string(out)
	})
	waitFor(t, 60*time.Second, "export errors of the wrong credentials in the inventory's status", func() (bool, string) {
		var inv kollectv1.KollectInventory
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "all"}, &inv); err != nil {
			return false, err.Error()
		}
		failing := map[string]bool{}
		for _, s := range inv.Status.Sinks {
			failing[s.Name] = s.LastError != ""
		}
		// Sinks that cannot be built (the inline credentials) are in the Degraded condition.
		degraded := apimeta.FindStatusCondition(inv.Status.Conditions, kollectv1.ConditionDegraded)
		refused := degraded != nil && strings.Contains(degraded.Message, "credentials in URLs are refused")
		ok := failing["pg-wrong"] && failing["nats-token-wrong"] && failing["s3-wrong"] && !failing["pg-good"] && refused
		return ok, fmt.Sprintf("failing %v, the inline credentials refused in Degraded: %t", failing, refused)
	})
	waitFor(t, 60*time.Second, "retries of the exports with the wrong credentials (kollect_export_errors_total)", func() (bool, string) {
		m, err := scrape("http://" + metricsAddr + "/metrics")
		if err != nil {
			return false, err.Error()
		}
		// Refused credentials are terminal for PostgreSQL, S3 and git (retried after ten
		// minutes); the event sinks' closed connections are transient, retried with backoff.
		var pending []string
		for name, calls := range map[string]float64{"pg-wrong": 1, "s3-wrong": 1, "git-wrong": 1, "kafka-wrong": 2, "nats-user-wrong": 2, "nats-token-wrong": 2} {
			if got := exportErrors(m, name); got < calls {
				pending = append(pending, fmt.Sprintf("%s: %v of %v", name, got, calls))
			}
		}
		return len(pending) == 0, fmt.Sprintf("too few failed export calls: %v", pending)
	})
	waitFor(t, 30*time.Second, "a Warning event of the failing exports", func() (bool, string) {
		var evs corev1.EventList
		if err := c.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Type == corev1.EventTypeWarning && e.InvolvedObject.Name == "all" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events, none a Warning about inventory all", len(evs.Items))
	})
	waitFor(t, 30*time.Second, "the heartbeat with the export errors at the hub", func() (bool, string) {
		raw, err := h.call(ctx, "GetCluster", map[string]string{"name": clusterName})
		if err != nil {
			return false, err.Error()
		}
		var out struct {
			Status struct {
				Sinks []struct{ Name, LastError string }
			}
		}
		_ = json.Unmarshal(raw, &out)
		for _, s := range out.Status.Sinks {
			if s.Name == "pg-wrong" && strings.Contains(s.LastError, "password authentication failed") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d sinks in the last heartbeat", len(out.Status.Sinks))
	})
	t.Logf("every sink probed and exported, the row in psql, the errors at the hub after %s", time.Since(began).Round(time.Millisecond))

	// A rotation: pg-wrong's Secret fixed to the right password. The agent notices the new
	// Secret version, rebuilds the sink and its export succeeds.
	var fix corev1.Secret
	must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pg-wrong"}, &fix))
	fix.Data["password"] = []byte(secret)
	must(t, c.Update(ctx, &fix))
	rotated := time.Now()
	waitFor(t, 60*time.Second, "pg-wrong exporting after its Secret was fixed", func() (bool, string) {
		var inv kollectv1.KollectInventory
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "all"}, &inv); err != nil {
			return false, err.Error()
		}
		for _, s := range inv.Status.Sinks {
			if s.Name == "pg-wrong" {
				return s.LastError == "" && s.Checksum == inv.Status.Checksum, fmt.Sprintf("pg-wrong error class %q", s.ErrorClass)
			}
		}
		return false, "pg-wrong not in the inventory's status"
	})
	t.Logf("pg-wrong exported %s after its Secret was fixed", time.Since(rotated).Round(time.Millisecond))

	// The CLI, with the planted secret in its URLs: the right password prints rows; the wrong
	// one, a MongoDB URI with a password and malformed URLs print errors; validate refuses the
	// inline credentials; then the hub's view of the cluster. Each must say what shows that
	// its path ran (the planted row, the server's refusal, the rule).
	pgURL := func(pass, port string) string {
		return fmt.Sprintf("postgres://%s:%s@127.0.0.1:%s/postgres?sslmode=disable", pgRole, pass, port)
	}
	port := fmt.Sprint(srv.pg.Port)
	hubEnv := []string{"KOLLECT_HUB_CONFIG=" + filepath.Join(t.TempDir(), "hub.json")}
	mongoHost := strings.TrimPrefix(srv.mongo.URI, "mongodb://")
	var cliOut, hubCLI []seen
	for _, run := range []struct {
		what, want string
		env        []string
		args       []string
	}{
		{"kollect query --postgres (right password)", rowValue, nil, []string{"query", "--postgres", pgURL(secret, port), "-o", "ndjson"}},
		{"kollect query --postgres (wrong password)", "password authentication failed", nil, []string{"query", "--postgres", pgURL(wrong, port)}},
		{"kollect query --postgres (malformed URL)", "port", nil, []string{"query", "--postgres", pgURL(secret, port+"0000000")}},
		// Malformed connection strings, where a parser may quote what it could not parse.
		{"kollect query --postgres (keyword DSN, bad port)", "kollect:", nil,
			[]string{"query", "--postgres", "host=127.0.0.1 port=notaport user=kollect password=" + secret}},
		{"kollect query --postgres (keyword DSN, unterminated quote)", "kollect:", nil,
			[]string{"query", "--postgres", "host=127.0.0.1 user=kollect password='" + secret}},
		{"kollect query --postgres (bad sslmode)", "kollect:", nil, []string{"query", "--postgres",
			fmt.Sprintf("postgres://%s:%s@127.0.0.1:%s/postgres?sslmode=bogus", pgRole, secret, port)}},
		{"kollect query --postgres (bad IPv6 host)", "kollect:", nil, []string{"query", "--postgres", "postgres://kollect:" + secret + "@[::1/postgres"}},
		{"kollect query --mongodb (password in the URI)", "AuthenticationFailed", nil,
			[]string{"query", "--database", "kollect", "--timeout", "5s", "--mongodb", "mongodb://kollect:" + secret + "@" + mongoHost}},
		{"kollect query --mongodb (malformed URI)", "error parsing uri", nil,
			[]string{"query", "--database", "kollect", "--timeout", "5s", "--mongodb", "mongodb://kollect:" + secret + "@127.0.0.1:99999999/?authSource=%zz"}},
		{"kollect sinks purge --postgres (wrong password)", "password authentication failed", nil,
			[]string{"sinks", "purge", "--cluster", clusterName, "--dry-run", "--postgres", pgURL(wrong, port)}},
		{"kollect sinks purge --postgres (right password, dry run)", "dry run: nothing removed", nil,
			[]string{"sinks", "purge", "--cluster", clusterName, "--dry-run", "--postgres", pgURL(secret, port)}},
		{"kollect sinks purge --mongodb (password in the URI)", "AuthenticationFailed", nil,
			[]string{"sinks", "purge", "--cluster", clusterName, "--dry-run", "--database", "kollect", "--timeout", "5s", "--mongodb", "mongodb://kollect:" + secret + "@" + mongoHost}},
		{"kollect validate (the inline-credential sinks)", "credentials in URLs are refused", nil, []string{"validate", inlineManifests(t, cases)}},
		{"kollect hub login", "logged in", hubEnv, []string{"hub", "login", "--url", "https://" + h.addr, "--token", h.adminToken, "--ca-fingerprint", h.pin}},
		{"kollect hub clusters", clusterName, hubEnv, []string{"hub", "clusters"}},
		// A preview whose profile reads the planted row value as an integer: the agent's answer
		// (kept in the hub's store) names the failure, never the value.
		{"kollect hub bundle preview (the planted row value read as an integer)", "want an integer, got a string that is not one", hubEnv,
			[]string{"hub", "bundle", "preview", "leak-preview", "-f", previewManifests(t), "--selector", "leak=test", "-o", "json"}},
		{"kollect hub bundle apply (the inline-credential sinks)", "credentials in URLs are refused", hubEnv,
			[]string{"hub", "bundle", "apply", "inline-cli", "-f", inlineManifests(t, cases), "--dry-run"}},
	} {
		out := runCLI(t, run.env, run.args...)
		if !strings.Contains(out, run.want) {
			t.Errorf("%s does not say %q, so it proves nothing: %s", run.what, run.want, strings.ReplaceAll(out, secret, "<secret>"))
		}
		cliOut = append(cliOut, seen{run.what, out})
		if run.env != nil {
			hubCLI = append(hubCLI, seen{run.what, out})
		}
	}

	// A bundle with the secret in a sink URL: the hub refuses it, and must not keep it.
	bundle := cases[len(cases)-1].manifest(ns, false)
	if raw, err := h.call(ctx, "ApplyBundle", map[string]any{"name": "inline", "manifests": bundle, "clusterSelector": map[string]any{}}); err == nil {
		t.Errorf("the hub stored a bundle with the secret in a sink URL: %s", strings.ReplaceAll(string(raw), secret, "<secret>"))
	} else {
		refusals = append(refusals, seen{"the hub's refusal of a bundle with an inline credential", err.Error()})
	}

	// A bundle holding a Secret: the hub allows kollect.dev kinds only.
	secretBundle := fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata: {name: pg-good, namespace: %s}\nstringData: {password: %s}\n", ns, secret)
	if _, err := h.call(ctx, "ApplyBundle", map[string]any{"name": "secret", "manifests": secretBundle, "clusterSelector": map[string]any{}}); err == nil {
		t.Error("the hub stored a bundle holding a Secret")
	} else {
		refusals = append(refusals, seen{"the hub's refusal of a bundle holding a Secret", err.Error()})
	}

	// The agent's own hub credential, issued at registration: a secret like the others.
	var cred corev1.Secret
	must(t, c.Get(ctx, client.ObjectKey{Namespace: "kollect-system", Name: "kollect-hub-credential"}, &cred))
	if len(cred.Data["credential"]) < 16 {
		t.Fatalf("the agent's hub credential Secret holds no credential: keys %v", keys(cred.Data))
	}
	secretPlants = append(secretPlants, plant{"agent's hub credential", string(cred.Data["credential"])})

	// Collect everything, the hub's store while it runs (its WAL) and again once stopped.
	hubAPI := hubAnswers(t, ctx, h)
	metrics, err := scrape("http://" + metricsAddr + "/metrics")
	must(t, err)
	agentHTTP := []seen{{"the agent's /metrics", metrics}}
	for _, path := range []string{"/healthz?verbose", "/readyz?verbose"} {
		body, err := scrape("http://" + healthAddr + path)
		must(t, err)
		agentHTTP = append(agentHTTP, seen{"the agent's " + path, body})
	}
	objects, err := apiObjects(ctx, cp.Config, false)
	must(t, err)
	events := eventSources(t, ctx, c)
	hubFiles, err := dirFiles(h.data, "hub data dir (running):")
	must(t, err)
	agent.stop()
	h.stop()
	stopped, err := dirFiles(h.data, "hub data dir (stopped):")
	must(t, err)
	hubFiles = append(hubFiles, stopped...)
	// The agent's cache volume (git clones, the last snapshots): rows belong there, credentials do not.
	cache, err := dirFiles(cacheDir, "agent cache dir:")
	must(t, err)
	agentLog, hubLog := agent.output(), h.output()
	if !strings.Contains(agentLog, "pg-wrong") || !strings.Contains(agentLog, `"level":"debug"`) {
		t.Errorf("the agent's log names no failing sink or has no debug lines: it cannot prove anything")
	}
	// client-go's body dumps (V(8) and above) hold the Secrets the agent reads, protobuf ones
	// as hex, which the search below cannot see through: the agent must never write them.
	if strings.Contains(agentLog, `"Response Body"`) || strings.Contains(agentLog, `"Request Body"`) {
		t.Errorf("the agent's log at --zap-log-level=10 holds client-go's request or response bodies")
	}
	if strings.Contains(agentLog, "Server rejected event") {
		t.Errorf("the API server refused some of the agent's Events: they were never there to search")
	}

	// A control: the sweep reads values as written. A bypassing sink's spec, read the same
	// way, holds the secret; were it encoded somehow, every search above would pass vacuously.
	if ctl, err := apiObjects(ctx, cp.Config, true); err != nil || !anyContains(ctl, secret) {
		t.Fatalf("the API sweep does not find the secret where the test wrote it (err %v): it cannot prove anything", err)
	}

	n := hits(t, "agent", append(agentHTTP, seen{"the agent's stdout and stderr", agentLog}), secretPlants...)
	n += hits(t, "agent cache", cache, secretPlants...)
	n += hits(t, "API", objects, secretPlants...)
	n += hits(t, "events", events, secretPlants...)
	n += hits(t, "CLI", cliOut, secretPlants...)
	n += hits(t, "refusal", refusals, secretPlants...)
	n += hits(t, "hub", append(append([]seen{{"the hub's stdout and stderr", hubLog}}, hubFiles...), hubAPI...), append(secretPlants, rowPlant)...)
	n += hits(t, "hub CLI", hubCLI, rowPlant)
	t.Logf("searched %d sources (%d API objects, %d events, %d agent cache files, %d hub files, %d hub answers) for the planted secret and row value in %s",
		n, len(objects), len(events), len(cache), len(hubFiles), len(hubAPI), time.Since(began).Round(time.Millisecond))
}

// waitWebhook waits until the agent's webhook answers the API server, creating (and
// deleting) a valid sink.
func waitWebhook(t *testing.T, ctx context.Context, c client.Client) {
	probe := "apiVersion: kollect.dev/v1alpha1\nkind: KollectEventSink\nmetadata: {name: webhook-probe, namespace: " + ns +
		"}\nspec: {type: nats, nats: {servers: [\"nats://127.0.0.1:1\"]}}\n"
	waitFor(t, 60*time.Second, "the agent's admission webhook", func() (bool, string) {
		if err := applyYAML(ctx, c, probe); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	must(t, c.Delete(ctx, &kollectv1.KollectEventSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "webhook-probe"}}))
}

// waitSinks waits until every sink's Ready condition says what its case expects.
// It returns each sink's Ready reason and message, to show in the test's log what every
// path said.
func waitSinks(t *testing.T, ctx context.Context, c client.Client, cases []sinkCase) map[string]string {
	said := map[string]string{}
	waitFor(t, 90*time.Second, "every sink's Ready condition", func() (bool, string) {
		var pending []string
		for _, sc := range cases {
			u := &unstructured.Unstructured{}
			u.SetAPIVersion("kollect.dev/v1alpha1")
			u.SetKind(sc.kind)
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: sc.name}, u); err != nil {
				return false, err.Error()
			}
			var st kollectv1.SinkStatus
			if m, ok := u.Object["status"].(map[string]any); ok {
				raw, _ := json.Marshal(m)
				_ = json.Unmarshal(raw, &st)
			}
			cond := apimeta.FindStatusCondition(st.Conditions, kollectv1.ConditionReady)
			want := sc.want
			if sc.inline {
				want = "credentials in URLs are refused"
			}
			switch {
			case cond == nil:
				pending = append(pending, sc.name+": no Ready condition")
				continue
			case sc.ready && (cond.Status != metav1.ConditionTrue || st.Preview == nil):
				pending = append(pending, fmt.Sprintf("%s: want Ready=True with a preview, got %s %s", sc.name, cond.Status, cond.Reason))
			case !sc.ready && (cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, want)):
				pending = append(pending, fmt.Sprintf("%s: want Ready=False saying %q, got %s %s", sc.name, want, cond.Status, cond.Reason))
			}
			said[sc.name] = cond.Reason + ": " + cond.Message
		}
		return len(pending) == 0, strings.Join(pending, "\n  ")
	})
	return said
}

// inlineManifests writes the sinks with inline credentials to a file for `kollect validate`.
func inlineManifests(t *testing.T, cases []sinkCase) string {
	var docs []string
	for _, sc := range cases {
		if sc.inline {
			docs = append(docs, sc.manifest(ns, false))
		}
	}
	p := filepath.Join(t.TempDir(), "inline.yaml")
	must(t, os.WriteFile(p, []byte(strings.Join(docs, "---\n")), 0o600))
	return p
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// exportErrors sums kollect_export_errors_total of one sink (label sink=family/ns/name).
func exportErrors(metrics, name string) float64 {
	var sum float64
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, "kollect_export_errors_total{") && strings.Contains(line, "/"+ns+"/"+name+`"`) {
			var v float64
			if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
				sum += v
			}
		}
	}
	return sum
}

func anyContains(sources []seen, s string) bool {
	for _, src := range sources {
		if strings.Contains(src.text, s) {
			return true
		}
	}
	return false
}

// applyYAML creates every document of a multi-document YAML stream, as unstructured objects.
func applyYAML(ctx context.Context, c client.Client, stream string) error {
	for _, doc := range strings.Split(stream, "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			return fmt.Errorf("decoding %s: %w", doc, err)
		}
		if err := c.Create(ctx, u); err != nil {
			return fmt.Errorf("creating %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	return nil
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// previewManifests is a bundle whose profile reads the ConfigMap holding the planted row value
// as an integer, so that every object fails extraction with a type error.
func previewManifests(t *testing.T) string {
	file := filepath.Join(t.TempDir(), "preview.yaml")
	must(t, os.WriteFile(file, []byte(fmt.Sprintf(`apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: owner-as-int, namespace: %[1]s}
spec:
  target: {version: v1, kind: ConfigMap}
  attributes: [{name: owner, jsonPath: "{.data.owner}", type: int}]
---
apiVersion: kollect.dev/v1alpha1
kind: KollectTarget
metadata: {name: owner-as-int, namespace: %[1]s}
spec:
  profileRef: {name: owner-as-int}
  names: {include: [owner]}
`, ns)), 0o644))
	return file
}
