package agent

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// TestHubDeliveredSinkReadsOnlyLabelledSecrets: two git sinks as a hub bundle would deliver
// them (the applier's managed-by label), pointing at one listener of the bundle author's
// choosing. The one naming a Secret the admin did not label for hub sinks (here standing for
// the agent's hub bootstrap Secret) is refused with HubSecretDenied and its Secret never
// reaches the listener; the one naming a labelled Secret does reach it with that Secret's
// credentials (the positive control over the same window). A sink the admin created
// (unlabelled) may use the unlabelled Secret: the gate is about who wrote the sink.
func TestHubDeliveredSinkReadsOnlyLabelledSecrets(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string][]string{} // repository path → the basic-auth users that reached it
	listener := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, _ := r.BasicAuth()
		mu.Lock()
		repo := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 2)[0]
		seen[repo] = append(seen[repo], user+":"+pass)
		mu.Unlock()
		w.Header().Set("WWW-Authenticate", `Basic realm="x"`)
		w.WriteHeader(http.StatusUnauthorized)
	}))
	t.Cleanup(listener.Close)
	reached := func(repo string) []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen[repo]...)
	}

	ns := "hub-secrets"
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	create(t,
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kollect-hub-bootstrap"},
			Data: map[string][]byte{"username": []byte("oauth2"), "password": []byte("kbt_planted"), "token": []byte("kbt_planted")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "git-for-hub", Labels: map[string]string{kollectv1.LabelHubSinks: kollectv1.HubSinksAllowed}},
			Data: map[string][]byte{"username": []byte("granted"), "password": []byte("granted-pass")}})
	hubLabels := map[string]string{kollectv1.LabelManagedBy: kollectv1.ManagedByHub}
	gitSink := func(name, repo, secret string, labels map[string]string) *kollectv1.KollectSnapshotSink {
		return &kollectv1.KollectSnapshotSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
			Spec: kollectv1.KollectSnapshotSinkSpec{Type: kollectv1.SnapshotSinkGit,
				Git: &kollectv1.GitSinkConfig{URL: listener.URL + "/" + repo + "/inv.git", SecretRef: &kollectv1.SecretReference{Name: secret}}}}
	}
	stolen := gitSink("exfiltrate", "stolen", "kollect-hub-bootstrap", hubLabels)
	granted := gitSink("granted", "granted", "git-for-hub", hubLabels)
	local := gitSink("local", "local", "kollect-hub-bootstrap", nil)
	create(t, stolen, granted, local)
	startAgentWith(t, nil, "c-hub-secrets", ns, nil)

	scopeCondition(t, stolen, func() []metav1.Condition { return stolen.Status.Conditions }, kollectv1.ConditionReady, metav1.ConditionFalse,
		kollectv1.ReasonHubSecretDenied, "Secret hub-secrets/kollect-hub-bootstrap is not labelled kollect.dev/hub-sinks=allow")
	eventually(t, 30*time.Second, "the granted and the local sink's probes at the listener", func() (bool, string) {
		g, l := reached("granted"), reached("local")
		return strings.Contains(strings.Join(g, " "), "granted:granted-pass") && len(l) > 0, strings.Join(append(g, l...), " ")
	})
	if got := reached("stolen"); len(got) != 0 {
		t.Fatalf("the refused sink reached the listener: %v", got)
	}
}
