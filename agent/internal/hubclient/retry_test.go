package hubclient

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/testenv"
)

const fleetBundle = `apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: fleet-configmaps, namespace: kollect-fleet}
spec:
  target: {version: v1, kind: ConfigMap}
  attributes: [{name: object, jsonPath: "{.metadata.name}"}]
---
apiVersion: kollect.dev/v1alpha1
kind: KollectTarget
metadata: {name: fleet-configmaps, namespace: kollect-fleet}
spec: {profileRef: {name: fleet-configmaps}}
`

// logLines records what the applier logs, in order.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, args)
	}, funcr.Options{})
}

// index returns the positions of the lines holding every part.
func (l *logLines) index(parts ...string) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []int
	for i, line := range l.lines {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			out = append(out, i)
		}
	}
	return out
}

// TestForbiddenObjectsApplyOnceTheAgentMayWriteThem: the agent's ServiceAccount (a narrow
// Role: everything on the fleet namespace's profiles but patch) cannot apply a bundle's
// profile. The result is FAILED with the API server's reason, logged once however often the
// configuration is applied again, while the bundle's target is applied. Retrying before the
// grant fails again; once the Role grants patch the retry loop applies the profile — the
// backoff is an hour here, so only the access review can have triggered it — without a new
// revision and without a new applier, and reports the change.
func TestForbiddenObjectsApplyOnceTheAgentMayWriteThem(t *testing.T) {
	cp, err := testenv.Start("hubclient-retry", testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	ctx := t.Context()
	for _, ns := range []string{"kollect-system", "kollect-fleet"} {
		if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	const sa = "system:serviceaccount:kollect-system:agent"
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "agent", Namespace: "kollect-system"}}
	read := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "agent-read"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{kollectv1.GroupVersion.Group}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}}}}
	write := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "kollect-fleet", Name: "agent-apply"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{kollectv1.GroupVersion.Group}, Resources: []string{"kollectprofiles"}, Verbs: []string{"create", "update", "delete"}},
		{APIGroups: []string{kollectv1.GroupVersion.Group}, Resources: []string{"kollecttargets"}, Verbs: []string{"create", "update", "patch", "delete"}}}}
	for _, o := range []client.Object{read, write,
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "agent-read"}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "agent-read"}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "kollect-fleet", Name: "agent-apply"}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "agent-apply"}},
	} {
		if err := cp.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: sa, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kollect-system", "system:authenticated"}}
	agentClient, err := client.New(cfg, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}

	var logs logLines
	a := NewApplier(agentClient, Options{AllowedNamespaces: []string{"kollect-fleet"}, DefaultNamespace: "kollect-fleet", Log: logs.logger()})
	a.retry = retryPolicy{base: time.Hour, max: time.Hour, probe: 20 * time.Millisecond}
	revision1 := &fleetv1.WatchConfigResponse{ConfigDigest: "d1", Bundles: []*fleetv1.BundleAssignment{
		{Bundle: "fleet", Revision: 1, Digest: "b1", Manifests: fleetBundle}}}
	forbidden := `cannot patch resource "kollectprofiles" in API group "kollect.dev" in the namespace "kollect-fleet"`
	for range 2 { // a reconnect, or another bundle's revision, applies the configuration again
		if err := a.Apply(ctx, revision1); err != nil {
			t.Fatal(err)
		}
		checkResults(t, a, map[string]string{
			"KollectProfile kollect-fleet/fleet-configmaps": "FAILED server-side apply of KollectProfile kollect-fleet/fleet-configmaps: ",
			"KollectTarget kollect-fleet/fleet-configmaps":  "APPLIED",
		})
		if msg := resultOf(a, "fleet-configmaps", "KollectProfile").GetMessage(); !strings.Contains(msg, forbidden) {
			t.Fatalf("the failure does not say why: %q", msg)
		}
	}
	failedLog := logs.index("hub object not applied", "fleet-configmaps", `cannot patch resource \"kollectprofiles\"`)
	if len(failedLog) != 1 {
		t.Fatalf("the refused write is logged %d times, want once:\n%s", len(failedLog), strings.Join(logs.lines, "\n"))
	}
	// Control: before the grant, a retry pass fails the same way and changes nothing.
	if a.RetryFailed(ctx) {
		t.Fatal("a retry before the grant changed a result")
	}

	changed := make(chan struct{}, 1)
	go a.RunRetries(ctx, func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	write.Rules[0].Verbs = append(write.Rules[0].Verbs, "patch")
	if err := cp.Client.Update(ctx, write); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(time.Minute):
		t.Fatalf("the profile was not applied within a minute of the grant:\n%s", strings.Join(logs.lines, "\n"))
	}
	checkResults(t, a, map[string]string{
		"KollectProfile kollect-fleet/fleet-configmaps": "APPLIED",
		"KollectTarget kollect-fleet/fleet-configmaps":  "APPLIED",
	})
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(kollectv1.GroupVersion.WithKind("KollectProfile"))
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "kollect-fleet", Name: "fleet-configmaps"}, live); err != nil {
		t.Fatalf("the profile is not in the cluster after the grant: %v", err)
	}
	if rev := live.GetAnnotations()[AnnotationRevision]; rev != "1" || live.GetLabels()[LabelBundle] != "fleet" {
		t.Errorf("applied profile: revision %q, labels %v; want revision 1 of bundle fleet", rev, live.GetLabels())
	}
	if _, digest, _ := a.Snapshot(); digest != "d1" {
		t.Errorf("config digest %q, want the one configuration d1", digest)
	}
	if !a.Managed(live.GroupVersionKind(), client.ObjectKeyFromObject(live)) {
		t.Error("the retried profile is not managed (drift would not be reverted)")
	}
	appliedLog := logs.index("hub object applied", "fleet-configmaps")
	if len(appliedLog) != 1 || appliedLog[0] < failedLog[0] {
		t.Errorf("log order: failure at %v, applied at %v:\n%s", failedLog, appliedLog, strings.Join(logs.lines, "\n"))
	}
}

func resultOf(a *Applier, name, kind string) *fleetv1.ObjectResult {
	bundles, _, _ := a.Snapshot()
	for _, b := range bundles {
		for _, o := range b.GetObjects() {
			if o.GetObject().GetName() == name && o.GetObject().GetKind() == kind {
				return o
			}
		}
	}
	return nil
}

// TestRetryBackoff: 5 s doubling to 5 minutes.
func TestRetryBackoff(t *testing.T) {
	var got []time.Duration
	for n := 1; n <= 9; n++ {
		got = append(got, defaultRetryPolicy.delay(n))
	}
	want := []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second,
		160 * time.Second, 5 * time.Minute, 5 * time.Minute, 5 * time.Minute}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("delays %v, want %v", got, want)
		}
	}
}
