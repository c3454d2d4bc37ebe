package inventory

import (
	"fmt"
	"sort"
	"strings"

	"kollect.dev/agent/internal/collector"
	"kollect.dev/agent/internal/export"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// A reference in spec.targets that names no target (misspelt, deleted, not created yet) is
// unknown, not empty: it keeps the rows it had, like a forbidden kind. But renaming a
// reference from a target to such a name reaches the inventory as two changes: the old target
// left the inventory (and a target that leaves takes its rows out of the sinks) and a new,
// unknown one with no rows arrived. The agent cannot tell that rename from a removal, and
// reading it as a removal deletes every row of the target over a typo, while the status says
// the sinks keep their last rows.
//
// So while the inventory names a target that it cannot resolve (the collector does not
// collect it, its coverage is failed: the target object or its profile is missing or invalid)
// and that has no rows of its own to keep, the targets that left the inventory keep their last
// rows, unchanged, with coverage failed and a reason naming the unresolved references; the
// inventory is incomplete meanwhile, so nothing is confirmed. Once every reference resolves
// (the name is fixed: the target's rows are known again, and unchanged rows are not
// rewritten) or the unresolved references are removed, the next snapshot leaves the departed
// targets out: removing a reference from spec.targets is how a target's rows leave the sinks.

// unresolvedTarget reports whether a target the collector does not collect may be a renamed
// reference: its coverage is failed (not a kind that is not served, nor a scope's denial) and
// it has no earlier rows, so nothing says which target it is.
func unresolvedTarget(c export.Coverage) bool {
	return c.State == kollectv1.CoverageFailed && c.Rows == 0
}

// heldDeparted returns the rows of the targets that from holds but the inventory no longer
// names (nor a scope denies, whose rows must go), with a failed coverage entry and a problem
// for each, when unresolved (the names of unresolved targets, see unresolvedTarget) is not
// empty. Rollup rows are not a target's: their rollup is recomputed or kept by withRollups.
func heldDeparted(cfg Config, from *export.Snapshot, unresolved []string) ([]export.Row, []export.Coverage, []TargetProblem) {
	if from == nil || len(unresolved) == 0 {
		return nil, nil, nil
	}
	named := make(map[string]bool, len(cfg.Targets)+len(cfg.Denied))
	for _, tk := range cfg.Targets {
		named[tk.String()] = true
	}
	for tk := range cfg.Denied {
		named[tk.String()] = true
	}
	var rows []export.Row
	perTarget := map[string]int64{}
	for _, r := range from.Rows {
		if named[r.Target] || r.Group == kollectv1.RollupGroup && r.Kind == kollectv1.RollupKind {
			continue
		}
		rows = append(rows, r)
		perTarget[r.Target]++
	}
	if len(rows) == 0 {
		return nil, nil, nil
	}
	targets := make([]string, 0, len(perTarget))
	for t := range perTarget {
		targets = append(targets, t)
	}
	sort.Strings(targets)
	reason := fmt.Sprintf("no longer one of the inventory's targets, but its last rows are held while the inventory names %s, "+
		"which cannot be resolved and has no rows (a rename to a missing name is not a removal): fix that reference, or remove it and these rows are deleted",
		strings.Join(unresolved, ", "))
	coverage := make([]export.Coverage, 0, len(targets))
	problems := make([]TargetProblem, 0, len(targets))
	for _, t := range targets {
		coverage = append(coverage, export.Coverage{Target: t, State: kollectv1.CoverageFailed, Rows: perTarget[t], Reason: reason})
		problems = append(problems, TargetProblem{Target: targetKeyOf(t), Reason: reason})
	}
	return rows, coverage, problems
}

// targetKeyOf parses a target's name in rows (namespace/name, or name for a cluster target)
// back into its key. Object names hold no slash, so the split is unambiguous.
func targetKeyOf(s string) collector.TargetKey {
	if ns, name, ok := strings.Cut(s, "/"); ok {
		return collector.TargetKey{Namespace: ns, Name: name}
	}
	return collector.TargetKey{Name: s}
}
