package webhook_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"kollect.dev/agent/internal/agent"
	kollectwebhook "kollect.dev/agent/internal/webhook"
	kollectv1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

var cp *testenv.ControlPlane

// TestMain starts a control plane whose API server calls the webhooks of an in-process agent,
// wired exactly as kollect-agent wires them (agent.New with a webhook port).
func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	os.Exit(run(m))
}

func run(m *testing.M) int {
	cfg := kollectwebhook.Configuration("kollect-agent", admissionregistrationv1.ServiceReference{Namespace: "kollect-system", Name: "kollect-agent-webhook"}, nil)
	var err error
	if cp, err = testenv.Start("webhook", testenv.Options{WebhookInstallOptions: testenv.ValidatingWebhooks(cfg)}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = cp.Stop() }()
	ws := cp.WebhookServing()
	mgr, err := agent.New(cp.Config, agent.Options{Cluster: "admission", Namespaces: []string{"kollect-system"}, MetricsAddr: "0", HealthAddr: "0",
		SkipNameValidation: true, WebhookHost: ws.Host, WebhookPort: ws.Port, CertDir: ws.CertDir, Log: logr.Discard()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() { cancel(); <-done }()
	if err := waitForWebhook(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// waitForWebhook creates (and deletes) a profile until the webhook answers.
func waitForWebhook() error {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kollect-system"}}
	if err := cp.Client.Create(ctx, ns); err != nil {
		return err
	}
	var last error
	for range 100 {
		p := cmProfile("kollect-system", "probe")
		if last = cp.Client.Create(ctx, p); last == nil {
			return cp.Client.Delete(ctx, p)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("webhook never answered: %w", last)
}

func cmProfile(ns, name string) *kollectv1.KollectProfile {
	return &kollectv1.KollectProfile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: kollectv1.KollectProfileSpec{
		Target:     kollectv1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
		Attributes: []kollectv1.Attribute{{Name: "keys", CEL: "has(object.data) ? size(object.data) : 0", Type: kollectv1.AttributeInt}},
	}}
}

func deployProfile(ns, name string) *kollectv1.KollectProfile {
	return &kollectv1.KollectProfile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: kollectv1.KollectProfileSpec{
		Target:     kollectv1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
		Attributes: []kollectv1.Attribute{{Name: "replicas", JSONPath: "{.spec.replicas}", Type: kollectv1.AttributeInt}},
	}}
}

func namespace(t *testing.T, name string) string {
	t.Helper()
	if err := cp.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}

func mustCreate(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := cp.Client.Create(context.Background(), o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
}

// refused asserts the API server refuses obj with a message containing every want.
func refused(t *testing.T, obj client.Object, want ...string) {
	t.Helper()
	err := cp.Client.Create(context.Background(), obj)
	if err == nil {
		t.Fatalf("%T %s was admitted; want a refusal with %q", obj, obj.GetName(), want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("refusal of %s:\n  %v\nlacks %q", obj.GetName(), err, w)
		}
	}
}

func TestEachScopeRuleRefusedAtAdmission(t *testing.T) {
	ns := namespace(t, "team-a")
	mustCreate(t, &kollectv1.KollectScope{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "limits"}, Spec: kollectv1.KollectScopeSpec{
		AllowedKinds:      []kollectv1.GroupKindRule{{Kind: "ConfigMap"}},
		AllowedNamespaces: []string{"team-a"},
		AllowedSinks:      []kollectv1.SinkRule{{Family: "snapshot", Names: []string{"git-*"}}},
		MinDebounce:       &metav1.Duration{Duration: 10 * time.Second},
	}})
	mustCreate(t, cmProfile(ns, "cm"), deployProfile(ns, "deploy"),
		&kollectv1.KollectSnapshotSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "git-main"}, Spec: kollectv1.KollectSnapshotSinkSpec{
			Type: kollectv1.SnapshotSinkGit, Git: &kollectv1.GitSinkConfig{URL: "file:///unused"}}},
		&kollectv1.KollectSnapshotSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s3-main"}, Spec: kollectv1.KollectSnapshotSinkSpec{
			Type: kollectv1.SnapshotSinkGit, Git: &kollectv1.GitSinkConfig{URL: "file:///unused"}}},
	)

	refused(t, &kollectv1.KollectTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deploys"}, Spec: kollectv1.KollectTargetSpec{
		ProfileRef: kollectv1.LocalObjectReference{Name: "deploy"}}},
		"spec.profileRef", "ScopeKindDenied: KollectScope team-a/limits does not allow apps/Deployment")
	refused(t, &kollectv1.KollectTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "elsewhere"}, Spec: kollectv1.KollectTargetSpec{
		ProfileRef:      kollectv1.LocalObjectReference{Name: "cm"},
		TargetSelection: kollectv1.TargetSelection{Namespaces: &kollectv1.NamespaceSelection{Include: []string{"team-b"}}}}},
		"spec.namespaces", "ScopeNamespaceDenied: KollectScope team-a/limits does not allow namespace team-b")
	mustCreate(t, &kollectv1.KollectTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}, Spec: kollectv1.KollectTargetSpec{
		ProfileRef: kollectv1.LocalObjectReference{Name: "cm"}}})

	inv := func(name, sink string, debounce time.Duration) *kollectv1.KollectInventory {
		return &kollectv1.KollectInventory{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: kollectv1.KollectInventorySpec{
			Targets:      []kollectv1.LocalObjectReference{{Name: "cm"}},
			Sinks:        kollectv1.SinkReferences{Snapshot: []kollectv1.LocalObjectReference{{Name: sink}}},
			ExportTiming: kollectv1.ExportTiming{Debounce: metav1.Duration{Duration: debounce}, MaxDelay: metav1.Duration{Duration: time.Hour}},
		}}
	}
	refused(t, inv("to-s3", "s3-main", time.Minute), "spec.sinks.snapshot[0]", "ScopeSinkDenied: KollectScope team-a/limits does not allow snapshot sink s3-main")
	refused(t, inv("fast", "git-main", time.Second), "spec.debounce", "ScopeCadenceTooFast: debounce 1s is below the minimum 10s of KollectScope team-a/limits")
	mustCreate(t, inv("ok", "git-main", time.Minute))

	// A label change on an object the scope now forbids stays possible: only spec changes are judged.
	scope := &kollectv1.KollectScope{}
	_ = cp.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "limits"}, scope)
	scope.Spec.MinDebounce = &metav1.Duration{Duration: 5 * time.Minute}
	if err := cp.Client.Update(context.Background(), scope); err != nil {
		t.Fatal(err)
	}
	ok := &kollectv1.KollectInventory{}
	_ = cp.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "ok"}, ok)
	ok.Labels = map[string]string{"owner": "team-a"}
	if err := cp.Client.Update(context.Background(), ok); err != nil {
		t.Fatalf("metadata update of an admitted inventory refused: %v", err)
	}
	ok.Spec.Suspend = true
	if err := cp.Client.Update(context.Background(), ok); err == nil || !strings.Contains(err.Error(), "ScopeCadenceTooFast") {
		t.Fatalf("spec update below the new minimum: %v", err)
	}
}

func TestWrongSinkFamilyAndSecretRefs(t *testing.T) {
	ns := namespace(t, "families")
	mustCreate(t, &kollectv1.KollectDatabaseSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg"}, Spec: kollectv1.KollectDatabaseSinkSpec{
		Type: kollectv1.DatabaseSinkPostgres, Postgres: &kollectv1.PostgresSinkConfig{Host: "db", Database: "kollect",
			SecretRef: kollectv1.SecretReference{Name: "pg-credentials"}}}})
	refused(t, &kollectv1.KollectInventory{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "inv"}, Spec: kollectv1.KollectInventorySpec{
		Targets: []kollectv1.LocalObjectReference{{Name: "t"}},
		Sinks:   kollectv1.SinkReferences{Snapshot: []kollectv1.LocalObjectReference{{Name: "pg"}}}}},
		"spec.sinks.snapshot[0]", "pg is a KollectDatabaseSink (database family), not a KollectSnapshotSink")
	refused(t, &kollectv1.KollectDatabaseSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other"}, Spec: kollectv1.KollectDatabaseSinkSpec{
		Type: kollectv1.DatabaseSinkPostgres, Postgres: &kollectv1.PostgresSinkConfig{Host: "db", Database: "kollect",
			SecretRef: kollectv1.SecretReference{Name: "platform/pg-credentials"}}}},
		"spec.postgres.secretRef.name", "secrets are read from the sink's own namespace only")
}

// A URL carrying credentials is refused at admission, naming the field, and the refusal never
// shows the credential.
func TestInlineCredentialsRefusedAtAdmission(t *testing.T) {
	ns := namespace(t, "inline")
	const planted = "pl4nted-s3cret"
	for _, obj := range []client.Object{
		&kollectv1.KollectSnapshotSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "git"}, Spec: kollectv1.KollectSnapshotSinkSpec{
			Type: kollectv1.SnapshotSinkGit, Git: &kollectv1.GitSinkConfig{URL: "https://bot:" + planted + "@git.example.com/inv.git"}}},
		&kollectv1.KollectEventSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nats"}, Spec: kollectv1.KollectEventSinkSpec{
			Type: kollectv1.EventSinkNATS, NATS: &kollectv1.NATSSinkConfig{Servers: []string{"nats://u:" + planted + "@nats.example:4222"}}}},
	} {
		err := cp.Client.Create(context.Background(), obj)
		if err == nil || !strings.Contains(err.Error(), "credentials in URLs are refused") {
			t.Fatalf("%s: %v, want a refusal of its inline credentials", obj.GetName(), err)
		}
		if strings.Contains(err.Error(), planted) {
			t.Fatalf("the refusal shows the credential: %v", err)
		}
	}
	refused(t, &kollectv1.KollectEventSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nats2"}, Spec: kollectv1.KollectEventSinkSpec{
		Type: kollectv1.EventSinkNATS, NATS: &kollectv1.NATSSinkConfig{Servers: []string{"nats://a:4222", "nats://u:p@b:4222"}}}},
		"spec.nats.servers[1]")
	// A user name where it is not a secret is fine.
	mustCreate(t, &kollectv1.KollectSnapshotSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ssh"}, Spec: kollectv1.KollectSnapshotSinkSpec{
		Type: kollectv1.SnapshotSinkGit, Git: &kollectv1.GitSinkConfig{URL: "git@git.example.com:team/inv.git"}}})
}

func TestBadCELRejectedWithPosition(t *testing.T) {
	ns := namespace(t, "cel")
	p := cmProfile(ns, "bad")
	p.Spec.Attributes = append(p.Spec.Attributes, kollectv1.Attribute{Name: "broken", CEL: "object.metadata.name +"},
		kollectv1.Attribute{Name: "path", JSONPath: "{.spec.replicas"})
	refused(t, p, "spec.attributes[1].cel", "<input>:1:23", "spec.attributes[2].jsonPath")

	mustCreate(t, cmProfile(ns, "cm"))
	refused(t, &kollectv1.KollectTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "t"}, Spec: kollectv1.KollectTargetSpec{
		ProfileRef:      kollectv1.LocalObjectReference{Name: "cm"},
		TargetSelection: kollectv1.TargetSelection{Match: "object.metadata.labels['a'] =="}}},
		"spec.match", "<input>:1:")
	// A match whose type is known not to be bool would select nothing: refused, naming the
	// expression and its type.
	refused(t, &kollectv1.KollectTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "t"}, Spec: kollectv1.KollectTargetSpec{
		ProfileRef:      kollectv1.LocalObjectReference{Name: "cm"},
		TargetSelection: kollectv1.TargetSelection{Match: "size(object.metadata.name)"}}},
		"spec.match", `"size(object.metadata.name)"`, "must return bool, not int")
}

func TestClusterScopeGovernsClusterObjects(t *testing.T) {
	ns := namespace(t, "platform")
	mustCreate(t, cmProfile(ns, "cm"))
	cs := &kollectv1.KollectClusterScope{ObjectMeta: metav1.ObjectMeta{Name: "platform"}, Spec: kollectv1.KollectClusterScopeSpec{
		KollectScopeSpec: kollectv1.KollectScopeSpec{AllowedKinds: []kollectv1.GroupKindRule{{Group: "apps", Kind: "*"}}, AllowedNamespaces: []string{"*"}},
		// Selects no namespace: only cluster-scoped Kollect objects are governed.
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kollect.dev/test": "none"}},
	}}
	mustCreate(t, cs)
	t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), cs) })
	refused(t, &kollectv1.KollectClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: "all-cms"}, Spec: kollectv1.KollectClusterTargetSpec{
		ProfileRef: kollectv1.NamespacedObjectReference{Namespace: ns, Name: "cm"}}},
		"ScopeKindDenied: KollectClusterScope platform does not allow core/ConfigMap")
	// The namespace is not selected, so its own objects are unrestricted.
	mustCreate(t, &kollectv1.KollectTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}, Spec: kollectv1.KollectTargetSpec{
		ProfileRef: kollectv1.LocalObjectReference{Name: "cm"}}})
}

// TestFailsClosedForKollectKindsOnly points a copy of the configuration at a closed port for
// one namespace: Kollect objects there are refused, everything else and status writes are not.
func TestFailsClosedForKollectKindsOnly(t *testing.T) {
	ctx := context.Background()
	ns := "webhook-down"
	if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"kollect.dev/test": ns}}}); err != nil {
		t.Fatal(err)
	}
	p := cmProfile(ns, "before")
	mustCreate(t, p)

	down := kollectwebhook.Configuration("kollect-agent-down", admissionregistrationv1.ServiceReference{}, nil)
	for i := range down.Webhooks {
		w := &down.Webhooks[i]
		url := "https://127.0.0.1:1" + *w.ClientConfig.Service.Path
		w.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: cp.WebhookOptions().LocalServingCAData}
		w.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"kollect.dev/test": ns}}
		w.Name = "down-" + w.Name
	}
	mustCreate(t, down)
	t.Cleanup(func() { _ = cp.Client.Delete(ctx, down) })

	deadline := time.Now().Add(20 * time.Second)
	for {
		err := cp.Client.Create(ctx, cmProfile(ns, "during"))
		if err != nil && strings.Contains(err.Error(), "failed calling webhook") {
			break
		}
		if err == nil {
			_ = cp.Client.Delete(ctx, cmProfile(ns, "during"))
		}
		if time.Now().After(deadline) {
			t.Fatalf("Kollect kinds not refused while the webhook is unreachable: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := cp.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unaffected"}}); err != nil {
		t.Fatalf("a ConfigMap was refused: the webhook must only fail closed for Kollect kinds: %v", err)
	}
	p.Status.MetadataOnly = true
	if err := cp.Client.Status().Update(ctx, p); err != nil {
		t.Fatalf("status write refused while the webhook is down: %v", err)
	}
}

// A MongoDB URI whose options read the agent pod's own files (a CA, a client key) or
// identity (MONGODB-OIDC: the pod's service account token; GSSAPI) is refused at admission,
// naming the field: the sink's author would otherwise present the agent's key material, or
// authenticate as the agent, to a server of their choosing. MONGODB-AWS without a secretRef
// is ambient (a KollectClusterScope decides, TestAmbientCredentials), not refused here.
func TestPodFilesRefusedAtAdmission(t *testing.T) {
	ns := namespace(t, "podfiles")
	mongo := func(name, uri string) *kollectv1.KollectDatabaseSink {
		return &kollectv1.KollectDatabaseSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: kollectv1.KollectDatabaseSinkSpec{
			Type: kollectv1.DatabaseSinkMongoDB, MongoDB: &kollectv1.MongoDBSinkConfig{URI: uri, Database: "kollect"}}}
	}
	for name, uri := range map[string]string{
		"ca-file":    "mongodb://db.example:27017/?tls=true&tlsCAFile=/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
		"key-file":   "mongodb://db.example:27017/?tls=true&tlsCertificateKeyFile=%2Ftmp%2Fk8s-webhook-server%2Fserving-certs%2Ftls.key",
		"legacy-ssl": "mongodb://db.example:27017/?ssl=true;sslClientCertificateKeyFile=/etc/key.pem",
		"oidc":       "mongodb://db.example:27017/?authMechanism=MONGODB-OIDC&authMechanismProperties=ENVIRONMENT:k8s",
		"gssapi":     "mongodb://db.example:27017/?authMechanism=gssapi",
	} {
		err := cp.Client.Create(context.Background(), mongo(name, uri))
		if err == nil || !strings.Contains(err.Error(), "spec.mongodb.uri") || !strings.Contains(err.Error(), "read the agent pod's own files or identity") {
			t.Errorf("%s: %v, want a refusal naming spec.mongodb.uri", name, err)
		}
	}
	mustCreate(t, mongo("plain-tls", "mongodb://db.example:27017/?tls=true&replicaSet=rs0"))
	mustCreate(t, mongo("aws-ambient", "mongodb://db.example:27017/?authMechanism=MONGODB-AWS"))
}
