package charts

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/testenv"
)

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestLint runs helm lint --strict on each chart with the values of every case.
func TestLint(t *testing.T) {
	helm := tool(t, "helm")
	for _, c := range cases {
		vf := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(vf, []byte(c.values), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := run(root, helm, "lint", "--strict", filepath.Join("charts", c.chart), "--namespace", namespace, "--values", vf); err != nil {
			t.Errorf("%s: %v", c.name, err)
		} else if !strings.Contains(out, "0 chart(s) failed") {
			t.Errorf("%s: %s", c.name, out)
		}
	}
}

// TestRefusedValues: values that cannot work fail the render with a message naming the fix.
func TestRefusedValues(t *testing.T) {
	for _, f := range failures {
		_, err := render(t, renderCase{chart: f.chart, values: f.values})
		if err == nil {
			t.Errorf("%s chart accepted %q", f.chart, f.values)
			continue
		}
		if !strings.Contains(err.Error(), f.want) {
			t.Errorf("%s chart with %q: error lacks %q:\n%v", f.chart, f.values, f.want, err)
		}
	}
}

// TestRenderValidateApply renders every case, validates each manifest with kubeconform against
// schemas generated from the test apiserver, applies it with server-side dry-run, and runs the
// case's own checks.
func TestRenderValidateApply(t *testing.T) {
	t.Parallel() // its own control plane, servers and ports
	start := time.Now()
	manifests := map[string]string{}
	kinds := map[string]bool{}
	for _, c := range cases {
		out, err := render(t, c)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		manifests[c.name] = out
		for _, o := range decode(t, out) {
			kinds[strings.ToLower(o.GetKind())] = true
		}
	}
	t.Logf("rendered %d cases in %s", len(cases), time.Since(start).Round(time.Millisecond))

	cp, err := testenv.Start("charts", testenv.Options{ExtraCRDs: foreignCRDs()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	ctx := context.Background()
	// Namespaces the charts put objects in (the release's, sink and watch namespaces, and
	// hub.namespaces' default, which the chart creates but a dry run does not).
	for _, ns := range []string{namespace, "team-a", "team-b", "kollect-fleet"} {
		if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	schemas := t.TempDir()
	// Every rendered kind needs its schema: kubeconform must never skip a document. The
	// apiserver publishes a new CRD's OpenAPI shortly after the CRD is established, so look again
	// for a few seconds before failing.
	var n int
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Second) {
		if n, err = writeSchemas(cp.Config, schemas, kinds); err != nil {
			t.Fatal(err)
		}
		var missing []string
		for k := range kinds {
			if m, _ := filepath.Glob(filepath.Join(schemas, k+"-*.json")); len(m) == 0 {
				missing = append(missing, k)
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the apiserver's OpenAPI has no schema for the kinds %v", missing)
		}
	}
	t.Logf("wrote %d JSON schemas for %d kinds from the apiserver's OpenAPI v3", n, len(kinds))

	assets, err := testenv.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(assets, "kubectl")
	kubeconform := tool(t, "kubeconform")
	total := 0
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), c.name+".yaml")
			if err := os.WriteFile(file, []byte(manifests[c.name]), 0o644); err != nil {
				t.Fatal(err)
			}
			objs := decode(t, manifests[c.name])
			total += len(objs)
			out, err := run(root, kubeconform, "-strict", "-summary", "-output", "text",
				"-schema-location", filepath.Join(schemas, schemaTemplate), file)
			if err != nil {
				t.Fatalf("kubeconform: %v", err)
			}
			// A skipped document was not validated at all.
			if !strings.Contains(out, "Skipped: 0") || !strings.Contains(out, "Invalid: 0, Errors: 0") {
				t.Fatalf("kubeconform: %s", out)
			}
			out, err = run(root, kubectl, "--kubeconfig", cp.Kubeconfig, "apply", "--server-side", "--force-conflicts",
				"--dry-run=server", "--field-manager=kollect-chart-test", "-f", file)
			if err != nil {
				t.Fatalf("server-side dry-run: %v", err)
			}
			if got := strings.Count(out, "(server dry run)"); got != len(objs) {
				t.Errorf("dry-run applied %d of %d objects:\n%s", got, len(objs), out)
			}
			if c.check != nil {
				c.check(t, objs)
			}
		})
	}
	t.Logf("validated and dry-run applied %d objects of %d cases in %s", total, len(cases), time.Since(start).Round(time.Millisecond))

	// The generated schemas must catch what a chart typo produces: an unknown field and a
	// wrong type, each in a different kind.
	t.Run("kubeconform-refuses", func(t *testing.T) {
		bad := strings.Replace(manifests["agent-default"], "  replicas: 1\n", "  replica: 1\n", 1)
		bad = strings.Replace(bad, "      port: 8080\n", "      port: [8080]\n", 1)
		if bad == manifests["agent-default"] {
			t.Fatal("the manifest changed shape: update this test's replacements")
		}
		file := filepath.Join(t.TempDir(), "bad.yaml")
		if err := os.WriteFile(file, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := run(root, kubeconform, "-strict", "-summary", "-output", "text",
			"-schema-location", filepath.Join(schemas, schemaTemplate), file)
		if err == nil {
			t.Fatalf("kubeconform accepted an unknown field and a wrong type:\n%s", out)
		}
		for _, want := range []string{"replica", "Invalid: 2"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("kubeconform output lacks %q:\n%v", want, err)
			}
		}
	})

	t.Run("agent-rbac", func(t *testing.T) {
		testRBAC(t, cp, kubectl, manifests["agent-hub"])
		testAgentRuns(t, cp, kubectl, decode(t, manifests["agent-hub"]))
	})
	t.Run("helm-lifecycle", func(t *testing.T) { testLifecycle(t, cp) })
}

// testLifecycle installs, upgrades and uninstalls the charts with helm itself against the test
// apiserver (nothing runs the pods; this is about what Helm does with the objects). The CRDs
// exist already, as when someone applied api/crds by hand: --take-ownership adopts them.
func testLifecycle(t *testing.T, cp *testenv.ControlPlane) {
	ctx := context.Background()
	const ns = "helm-test"
	if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	helm := func(args ...string) {
		t.Helper()
		if _, err := run(root, tool(t, "helm"), append(args, "--kubeconfig", cp.Kubeconfig, "--namespace", ns)...); err != nil {
			t.Fatal(err)
		}
	}
	crdKey := client.ObjectKey{Name: "kollectprofiles.kollect.dev"}
	helm("install", "lifecycle", filepath.Join(root, "charts", "agent"), "--set", "clusterName=c1", "--take-ownership")
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := cp.Client.Get(ctx, crdKey, crd); err != nil {
		t.Fatal(err)
	}
	if crd.Annotations["meta.helm.sh/release-name"] != "lifecycle" || crd.Annotations["helm.sh/resource-policy"] != "keep" {
		t.Fatalf("CRD not owned by the release or not kept on uninstall: %v", crd.Annotations)
	}
	helm("upgrade", "lifecycle", filepath.Join(root, "charts", "agent"), "--set", "clusterName=c1", "--set", "replicas=2")
	dep := &appsv1.Deployment{}
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "lifecycle-kollect-agent"}, dep); err != nil {
		t.Fatal(err)
	}
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
		t.Fatalf("upgrade did not apply replicas=2: %v", dep.Spec.Replicas)
	}
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "lifecycle-kollect-agent"}, &policyv1.PodDisruptionBudget{}); err != nil {
		t.Fatalf("PodDisruptionBudget after scaling to 2: %v", err)
	}
	helm("install", "kollect-hub", filepath.Join(root, "charts", "hub"))
	helm("uninstall", "lifecycle")
	helm("uninstall", "kollect-hub")
	// The CRDs (and with them every Kollect object) survive the uninstall; the rest is gone.
	if err := cp.Client.Get(ctx, crdKey, crd); err != nil {
		t.Fatalf("uninstall deleted the CRD: %v", err)
	}
	if err := cp.Client.Get(ctx, client.ObjectKey{Name: ns + "-lifecycle-kollect-agent"}, &admissionregistrationv1.ValidatingWebhookConfiguration{}); !apierrors.IsNotFound(err) {
		t.Fatalf("webhook configuration after uninstall: %v", err)
	}
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kollect-hub"}, &corev1.PersistentVolumeClaim{}); err != nil {
		t.Fatalf("uninstall deleted the hub's data claim (CA, database): %v", err)
	}
}

// testRBAC installs the RBAC objects of the agent-hub case for real and asks the apiserver what
// the agent's ServiceAccount may do: least privilege is what the authorizer says, not what the
// templates look like.
func testRBAC(t *testing.T, cp *testenv.ControlPlane, kubectl, manifest string) {
	var keep []string
	for _, o := range decode(t, manifest) {
		switch o.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			keep = append(keep, toJSON(o.Object))
		}
	}
	file := filepath.Join(t.TempDir(), "rbac.json")
	if err := os.WriteFile(file, []byte(`{"apiVersion":"v1","kind":"List","items":[`+strings.Join(keep, ",")+`]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := run(root, kubectl, "--kubeconfig", cp.Kubeconfig, "apply", "--server-side", "-f", file); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	sa := "system:serviceaccount:" + namespace + ":kollect-agent"
	for _, c := range []struct {
		ns, verb, group, resource, sub, name string
		want                                 bool
	}{
		{"team-a", "get", "", "secrets", "", "pg", true},
		{namespace, "get", "", "secrets", "", "kollect-hub-bootstrap", true},
		{"default", "get", "", "secrets", "", "pg", false},
		{"", "list", "", "secrets", "", "", false},
		{"team-a", "list", "", "secrets", "", "", false},
		{"team-a", "watch", "", "secrets", "", "", false},
		{namespace, "create", "", "secrets", "", "", true},
		{namespace, "update", "", "secrets", "", "kollect-hub-credential", true},
		{namespace, "update", "", "secrets", "", "someone-elses", false},
		{"", "list", "apps", "deployments", "", "", true},
		{"", "watch", "", "pods", "", "", true},
		{"default", "delete", "apps", "deployments", "", "", false},
		{"default", "update", "", "configmaps", "", "", false},
		{"", "list", "kollect.dev", "kollectinventories", "", "", true},
		{"default", "update", "kollect.dev", "kollectinventories", "status", "", true},
		{"team-a", "create", "kollect.dev", "kollectprofiles", "", "", true},
		{"team-b", "patch", "kollect.dev", "kollectsnapshotsinks", "", "", true},
		{namespace, "patch", "kollect.dev", "kollectsnapshotsinks", "", "", false},
		{"default", "create", "kollect.dev", "kollectprofiles", "", "", false},
		{"", "create", "kollect.dev", "kollectclustertargets", "", "", true},
		// Scopes are the cluster admin's: without hub.allowScopes the agent may not write them.
		{"", "create", "kollect.dev", "kollectclusterscopes", "", "", false},
		{"team-a", "patch", "kollect.dev", "kollectscopes", "", "", false},
		{namespace, "update", "coordination.k8s.io", "leases", "", "kollect-agent", true},
		{"default", "update", "coordination.k8s.io", "leases", "", "kollect-agent", false},
		{"default", "create", "", "events", "", "", true},
		{"", "patch", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", namespace + "-kollect-agent", true},
		{"", "patch", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", "other", false},
		{"", "create", "apiextensions.k8s.io", "customresourcedefinitions", "", "", false},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: sa, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: c.ns, Verb: c.verb, Group: c.group,
				Resource: c.resource, Subresource: c.sub, Name: c.name},
		}}
		if err := cp.Client.Create(context.Background(), sar); err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed != c.want {
			t.Errorf("%s %s %s/%s name=%q in %q: allowed=%v, want %v", c.verb, c.group, c.resource, c.sub, c.name, c.ns, sar.Status.Allowed, c.want)
		}
	}
}

// foreignCRDs are minimal CRDs for the kinds the charts render from other projects
// (prometheus-operator, cert-manager), so their objects can be validated and dry-run applied:
// only the identity is checked here, their spec is whatever the real CRD accepts.
func foreignCRDs() []*apiextensionsv1.CustomResourceDefinition {
	preserve := true
	mk := func(group, kind, plural string) *apiextensionsv1.CustomResourceDefinition {
		return &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: plural + "." + group},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{
				Group: group, Scope: apiextensionsv1.NamespaceScoped,
				Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: kind, ListKind: kind + "List", Plural: plural, Singular: strings.ToLower(kind)},
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
					Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
						Type: "object",
						Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"spec": {Type: "object", XPreserveUnknownFields: &preserve},
						},
					}}}},
			},
		}
	}
	return []*apiextensionsv1.CustomResourceDefinition{
		mk("monitoring.coreos.com", "ServiceMonitor", "servicemonitors"),
		mk("monitoring.coreos.com", "PrometheusRule", "prometheusrules"),
		mk("cert-manager.io", "Certificate", "certificates"),
		mk("cert-manager.io", "Issuer", "issuers"),
	}
}
