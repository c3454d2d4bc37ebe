package webhook

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"kollect.dev/agent/internal/scope"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// stubLookup answers from fixed values.
type stubLookup struct {
	profiles map[string]*kollectv1.KollectProfile
	set      scope.Set
}

func (s stubLookup) Profile(_ context.Context, ns, name string) (*kollectv1.KollectProfile, error) {
	return s.profiles[ns+"/"+name], nil
}
func (stubLookup) SinkFamilies(context.Context, string, string) ([]kollectv1.SinkFamily, error) {
	return nil, nil
}
func (s stubLookup) Scopes(context.Context) (scope.Set, error)                 { return s.set, nil }
func (stubLookup) NamespaceLabels(context.Context, string) (labels.Set, error) { return nil, nil }
func (stubLookup) Namespaced(schema.GroupKind) (bool, bool)                    { return true, true }

func TestTenantModeRefusesAtAdmission(t *testing.T) {
	l := stubLookup{profiles: map[string]*kollectv1.KollectProfile{"team-a/cm": {Spec: kollectv1.KollectProfileSpec{
		Target: kollectv1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}}}}, set: scope.Set{TenantMode: true}}
	target := &kollectv1.KollectTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "t"},
		Spec: kollectv1.KollectTargetSpec{ProfileRef: kollectv1.LocalObjectReference{Name: "cm"}}}
	res, err := Validate(context.Background(), target, l)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Errors) != 1 || !strings.Contains(res.Errors[0].Error(), "ScopeMissing: tenant mode: namespace team-a has no KollectScope") {
		t.Fatalf("errors: %v", res.Errors)
	}
	// A target whose profile does not exist yet is admitted with a warning.
	target.Spec.ProfileRef.Name = "later"
	res, err = Validate(context.Background(), target, l)
	if err != nil || len(res.Errors) != 0 || len(res.Warnings) != 1 {
		t.Fatalf("missing profile: %v %v %v", err, res.Errors, res.Warnings)
	}
	inv := &kollectv1.KollectInventory{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "i"}}
	if res, _ := Validate(context.Background(), inv, l); len(res.Errors) != 1 || !strings.Contains(res.Errors[0].Error(), "ScopeMissing") {
		t.Fatalf("inventory in tenant mode: %v", res.Errors)
	}
}
