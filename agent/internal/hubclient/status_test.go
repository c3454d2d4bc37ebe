package hubclient

import (
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
