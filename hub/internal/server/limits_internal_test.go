package server

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// Every limit names a real procedure (a renamed RPC would silently fall back to the default),
// and no procedure may read more than the largest limit.
func TestRequestLimitsNameRealProcedures(t *testing.T) {
	t.Parallel()
	known := map[string]bool{}
	for _, svc := range []struct{ file, name string }{{"agent", "AgentService"}, {"fleet", "FleetService"}} {
		fd := fleetv1.File_kollect_fleet_v1_agent_proto
		if svc.file == "fleet" {
			fd = fleetv1.File_kollect_fleet_v1_fleet_proto
		}
		methods := fd.Services().ByName(protoreflect.Name(svc.name)).Methods()
		for i := range methods.Len() {
			p := "/kollect.fleet.v1." + svc.name + "/" + string(methods.Get(i).Name())
			known[p] = true
			if l := requestLimit(p); l <= 0 || l > 16<<20 {
				t.Errorf("%s reads up to %d bytes", p, l)
			}
		}
	}
	for p := range requestLimits {
		if !known[p] {
			t.Errorf("requestLimits names %s, which is not a procedure", p)
		}
	}
}
