package health

import (
	"time"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// Summary is what one heartbeat says in a few numbers: the per-cluster columns of the fleet
// view and the values a heartbeat history record keeps.
type Summary struct {
	Inventories         int64
	Items               int64
	InventoriesNotReady int64
	// SinkErrors counts sinks whose last export failed.
	SinkErrors int64
	// LastExport is the newest successful export of any sink; zero when none succeeded.
	LastExport time.Time
}

// Summarize sums up a status; a nil status (no heartbeat yet) is all zero.
func Summarize(st *fleetv1.AgentStatus) Summary {
	var s Summary
	for _, inv := range st.GetInventories() {
		s.Inventories++
		s.Items += inv.GetItemCount()
		if !Ready(inv) {
			s.InventoriesNotReady++
		}
	}
	for _, sink := range st.GetSinks() {
		if sink.GetLastError() != "" {
			s.SinkErrors++
		}
		if ts := sink.GetLastSuccessTime(); ts != nil {
			if t := ts.AsTime(); t.After(s.LastExport) {
				s.LastExport = t
			}
		}
	}
	return s
}

// Ready reports whether an inventory has a Ready condition that is True. One that has none
// yet (just created, never evaluated) is not ready either.
func Ready(inv *fleetv1.InventoryStatus) bool {
	for _, c := range inv.GetConditions() {
		if c.GetType() == kollectv1.ConditionReady {
			return c.GetStatus() == "True"
		}
	}
	return false
}
