package inventory

import (
	"fmt"

	"kollect.dev/agent/internal/export"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// A deleted inventory retires: its last export applies the deletion policy in every sink, and
// the controller lets the object go once every sink took it (RetireProgress.Done).
//
// Retain sends the rows the sinks hold (the last snapshot, unchanged: no row is written) with
// every target's coverage retired, so a reader sees the rows are no longer kept current, and
// nothing confirms them afterwards. Delete sends an empty snapshot with no coverage: the
// database sinks delete the rows and coverage entries, event sinks send a tombstone per row,
// snapshot sinks prune their documents. Both are ordinary exports, so every sink applies them
// with the retries, deadlines and circuit breaker of any other.

// retiredReason is the coverage reason of a retired target.
const retiredReason = "the inventory was deleted with deletionPolicy Retain: these rows are as last exported and no longer kept current"

// RetireProgress says how far a retiring inventory is.
type RetireProgress struct {
	Policy kollectv1.DeletionPolicy
	// Done: a last snapshot was built and every sink accepted it.
	Done bool
	// Pending names the sinks that have not accepted it yet, with their last error.
	Pending []string
}

// retiredContent turns a build's rows and coverage into the retiring export's. A Retain keeps
// the rows of the last snapshot when there is one (the rows the sinks hold), else what was
// collected now; it marks every target retired.
func retiredContent(policy kollectv1.DeletionPolicy, prev *export.Snapshot, rows []export.Row, coverage []export.Coverage) ([]export.Row, []export.Coverage) {
	if policy == kollectv1.DeletionDelete {
		return nil, nil
	}
	if prev != nil {
		rows = append([]export.Row(nil), prev.Rows...)
	}
	perTarget := map[string]int64{}
	for _, r := range rows {
		perTarget[r.Target]++
	}
	out := make([]export.Coverage, 0, len(coverage))
	for _, c := range coverage {
		out = append(out, export.Coverage{Target: c.Target, State: kollectv1.CoverageRetired, Rows: perTarget[c.Target], Reason: retiredReason})
	}
	return rows, out
}

// retireProgressLocked reports the progress of a retiring inventory from its sinks' status.
func (r *runner) retireProgressLocked(sinks []SinkStatus) *RetireProgress {
	if r.cfg.Retire == "" {
		return nil
	}
	p := &RetireProgress{Policy: r.cfg.Retire}
	// The last snapshot must come from the retiring configuration: before it was built, r.last
	// may still be the live inventory's.
	if r.last == nil || !r.retireBuilt {
		p.Pending = []string{"the last snapshot is not built yet"}
		return p
	}
	for _, s := range sinks {
		if s.Checksum == r.last.Checksum && s.Coverage == r.coverageDigest {
			continue
		}
		msg := s.Ref.String()
		if s.LastError != "" {
			msg = fmt.Sprintf("%s (%s)", msg, s.LastError)
		}
		p.Pending = append(p.Pending, msg)
	}
	p.Done = len(p.Pending) == 0
	return p
}
