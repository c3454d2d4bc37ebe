package auth

import (
	"strings"
	"testing"

	"kollect.dev/hub/internal/store"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// Every FleetService method must have a rule: a method added to the proto without one would
// be refused for everyone, and this test says so before a user does.
func TestEveryFleetProcedureHasARule(t *testing.T) {
	svc := fleetv1.File_kollect_fleet_v1_fleet_proto.Services().ByName("FleetService")
	methods := svc.Methods()
	for i := range methods.Len() {
		proc := "/kollect.fleet.v1.FleetService/" + string(methods.Get(i).Name())
		r, ok := rules[proc]
		if !ok {
			t.Errorf("%s has no authorisation rule", proc)
			continue
		}
		name := string(methods.Get(i).Name())
		mutating := !strings.HasPrefix(name, "List") && !strings.HasPrefix(name, "Get") &&
			!strings.HasPrefix(name, "Watch") && !strings.HasPrefix(name, "Diff") && name != "WhoAmI"
		if r.mutation != mutating {
			t.Errorf("%s: mutation = %v, want %v", proc, r.mutation, mutating)
		}
		if mutating && r.role < store.RoleOperator {
			t.Errorf("%s mutates but a viewer may call it", proc)
		}
	}
	if len(rules) != methods.Len() {
		t.Errorf("%d rules for %d methods", len(rules), methods.Len())
	}
}

func TestSecrets(t *testing.T) {
	a, ha, err := NewSecret(PrefixAgent)
	if err != nil {
		t.Fatal(err)
	}
	b, hb, _ := NewSecret(PrefixAgent)
	if a == b || ha == hb || !strings.HasPrefix(a, "kag_") || Hash(a) != ha || len(ha) != 64 {
		t.Fatalf("secrets %q %q hashes %q %q", a, b, ha, hb)
	}
	for _, r := range []store.Role{store.RoleViewer, store.RoleOperator, store.RoleAdmin} {
		back, ok := RoleFromProto(RoleToProto(r))
		if !ok || back != r {
			t.Errorf("role %v round trip: %v %v", r, back, ok)
		}
	}
	if _, ok := RoleFromProto(fleetv1.Role_ROLE_UNSPECIFIED); ok {
		t.Error("unspecified role accepted")
	}
}
