package fleet

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/testenv"
)

// TestAgentThatCouldNotStoreItsCredential: the shipped agent registers with a one-use
// bootstrap token while the API server refuses the credential Secret it then writes (a
// ValidatingAdmissionPolicy). It retries with the same token; once the Secret can be written
// the hub completes the registration instead of answering "already registered" or "used up",
// and the agent comes online on its one use.
func TestAgentThatCouldNotStoreItsCredential(t *testing.T) {
	t.Parallel() // its own control planes, hub and ports: it waits alongside the others
	ctx := context.Background()
	work := t.TempDir()
	h, admin, token := startHubWithToken(t, work, 1)
	cps, err := testenv.StartN("retry", 1, testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testenv.StopAll(cps) })
	cp := cps[0]

	deny := admissionv1.Deny
	policy := &admissionv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "no-hub-credential"},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
					Rule: admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"secrets"}}}}}},
			Validations: []admissionv1.Validation{{Expression: `object.metadata.name != "kollect-hub-credential"`,
				Message: "e2e: the hub credential may not be stored yet"}},
		}}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "no-hub-credential"},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy.Name, ValidationActions: []admissionv1.ValidationAction{deny}}}
	if err := cp.Client.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	if err := cp.Client.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	_ = cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kollect-system"}})
	// The policy is in force once a dry-run write of the Secret is refused by it.
	eventually(t, 60*time.Second, "the policy refusing the credential Secret", func() (bool, string) {
		err := cp.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kollect-system", Name: "kollect-hub-credential"}},
			client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "may not be stored yet"), fmt.Sprint(err)
	})

	startAgent(t, cp, h, token, "env=e2e")
	registrations := func() (first, retries int) {
		resp, err := admin.ListAuditEvents(ctx, connect.NewRequest(&fleetv1.ListAuditEventsRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range resp.Msg.GetEvents() {
			if e.GetAction() == "Register" && e.GetTarget() == "cluster/"+cp.Name {
				if strings.Contains(e.GetDetail(), "retry=true") {
					retries++
				} else {
					first++
				}
			}
		}
		return first, retries
	}
	// The agent registered, could not store the credential, and retried with the same token.
	eventually(t, 60*time.Second, "a registration and a retry", func() (bool, string) {
		first, retries := registrations()
		return first == 1 && retries >= 1, fmt.Sprintf("%d registrations, %d retries", first, retries)
	})
	if err := cp.Client.Delete(ctx, binding); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, "the agent online", func() (bool, string) {
		c, err := admin.GetCluster(ctx, connect.NewRequest(&fleetv1.GetClusterRequest{Name: cp.Name}))
		if err != nil {
			return false, err.Error()
		}
		return c.Msg.GetCluster().GetState() == fleetv1.ClusterState_CLUSTER_STATE_ONLINE, c.Msg.GetCluster().GetState().String()
	})
	toks, err := admin.ListBootstrapTokens(ctx, connect.NewRequest(&fleetv1.ListBootstrapTokensRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(toks.Msg.GetTokens()) != 1 || toks.Msg.GetTokens()[0].GetUses() != 1 || toks.Msg.GetTokens()[0].GetMaxUses() != 1 {
		t.Fatalf("bootstrap tokens after the retries: %v, want one token used once of one", toks.Msg.GetTokens())
	}
	if first, _ := registrations(); first != 1 {
		t.Fatalf("%d first registrations, want 1", first)
	}
}
