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
	// OldestConfirm is the oldest confirmation among the sinks (Confirmed of each): every sink
	// was confirmed current at least this recently. Zero when no sink has exported.
	OldestConfirm time.Time
}

// Confirmed is when a sink was last confirmed current: its last_confirm_time, or the time it
// last changed when it reports none (an agent older than confirmations, or an inventory not
// confirmed yet). Zero when it never exported.
func Confirmed(s *fleetv1.SinkStatus) time.Time {
	if ts := s.GetLastConfirmTime(); ts != nil {
		return ts.AsTime()
	}
	if ts := s.GetLastSuccessTime(); ts != nil {
		return ts.AsTime()
	}
	return time.Time{}
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
		if t := Confirmed(sink); !t.IsZero() && (s.OldestConfirm.IsZero() || t.Before(s.OldestConfirm)) {
			s.OldestConfirm = t
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
