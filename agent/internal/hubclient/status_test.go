package hubclient

import (
	"strings"
	"testing"

	kollectv1 "kollect.dev/api/v1alpha1"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// TestErrorClassReachesTheHub: each errorClass the agent writes in an inventory's sink status
// becomes the protocol's class in the heartbeat, the open breaker included.
func TestErrorClassReachesTheHub(t *testing.T) {
	for in, want := range map[string]fleetv1.SinkErrorClass{
		kollectv1.SinkErrorTransient:   fleetv1.SinkErrorClass_SINK_ERROR_CLASS_TRANSIENT,
		kollectv1.SinkErrorTerminal:    fleetv1.SinkErrorClass_SINK_ERROR_CLASS_TERMINAL,
		kollectv1.SinkErrorCircuitOpen: fleetv1.SinkErrorClass_SINK_ERROR_CLASS_CIRCUIT_OPEN,
	} {
		if got := errorClass(in); got != want {
			t.Errorf("errorClass(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestStaleInventoryStatusIsNotReported: an inventory whose status describes an older
// generation than its spec reaches the hub as Ready and Synced Unknown (a rollout gate then
// waits); a current one reaches it as it is.
func TestStaleInventoryStatusIsNotReported(t *testing.T) {
	conds := func() []*fleetv1.Condition {
		return []*fleetv1.Condition{{Type: kollectv1.ConditionReady, Status: "True", Reason: kollectv1.ReasonSnapshotReady},
			{Type: kollectv1.ConditionSynced, Status: "True", Reason: "Exported"}, {Type: kollectv1.ConditionDegraded, Status: "False"}}
	}
	for _, c := range current(conds(), 3, 3) {
		if c.Status != "True" && c.Type != kollectv1.ConditionDegraded {
			t.Errorf("current status: %s is %s, want it unchanged", c.Type, c.Status)
		}
	}
	for _, c := range current(conds(), 4, 3) {
		switch c.Type {
		case kollectv1.ConditionReady, kollectv1.ConditionSynced:
			if c.Status != "Unknown" || c.Reason != kollectv1.ReasonSyncing || !strings.Contains(c.Message, "generation 4") {
				t.Errorf("stale status: %s is %s %s %q, want Unknown Syncing naming generation 4", c.Type, c.Status, c.Reason, c.Message)
			}
		case kollectv1.ConditionDegraded:
			if c.Status != "False" {
				t.Errorf("stale status: Degraded changed to %s", c.Status)
			}
		}
	}
}
