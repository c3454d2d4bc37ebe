package inventory

import (
	"fmt"

	"kollect.dev/agent/internal/collector"
	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/inventory/rollup"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// withRollups adds the configured rollups' rows and coverage to a build's rows and coverage,
// and drops the targets' own rows when the inventory exports only rollups. A rollup is
// computed only when every one of its targets is complete: over a target whose rows are not
// known (syncing, forbidden, missing) its totals would be wrong, so it keeps the rows it had
// in from (the previous snapshot, or the stored one) and its coverage takes the target's
// state, as a raw target's does. A rollup that fails on its own account (its name taken, a
// target it names not in the inventory) is a problem of the inventory, named like a target.
func withRollups(cfg Config, rows []export.Row, coverage []export.Coverage, from *export.Snapshot) ([]export.Row, []export.Coverage, []TargetProblem) {
	if len(cfg.Rollups) == 0 && !cfg.ExcludeRaw {
		return rows, coverage, nil
	}
	var problems []TargetProblem
	state := make(map[string]export.Coverage, len(coverage))
	for _, c := range coverage {
		state[c.Target] = c
	}
	var extra []export.Row
	for _, spec := range cfg.Rollups {
		c, out, failed := rollupOf(cfg, spec, rows, state, from)
		extra = append(extra, out...)
		coverage = append(coverage, c)
		if failed {
			problems = append(problems, TargetProblem{Target: collector.TargetKey{Name: spec.Name}, Reason: c.Reason})
		}
	}
	if cfg.ExcludeRaw {
		rows = rows[:0]
		for i := range coverage {
			if _, raw := state[coverage[i].Target]; raw {
				coverage[i].Rows = 0 // none of the target's rows is in the snapshot
			}
		}
	}
	return append(rows, extra...), coverage, problems
}

// rollupOf computes one rollup, or says why it keeps its earlier rows; failed says the
// rollup itself is at fault, not one of its targets (whose own coverage says what it is).
func rollupOf(cfg Config, spec rollup.Spec, rows []export.Row, state map[string]export.Coverage, from *export.Snapshot) (c export.Coverage, out []export.Row, failed bool) {
	keep := func(st kollectv1.CoverageState, reason string) (export.Coverage, []export.Row) {
		kept := rowsOfTarget(from, spec.Name)
		return export.Coverage{Target: spec.Name, State: st, Rows: int64(len(kept)), Reason: reason}, kept
	}
	if _, clash := state[spec.Name]; clash {
		// Only a cluster inventory's selector can bring in a cluster target of the rollup's
		// name (the schema refuses a named one): its rows keep the name, the rollup yields.
		return export.Coverage{Target: spec.Name, State: kollectv1.CoverageFailed,
			Reason: fmt.Sprintf("rollup %s has the name of a target of the inventory: rename the rollup", spec.Name)}, nil, true
	}
	sources := spec.Targets
	if sources == nil {
		sources = targetNames(cfg.Targets)
	}
	for _, t := range sources {
		tc, ok := state[t]
		switch {
		case !ok:
			c, out = keep(kollectv1.CoverageFailed, fmt.Sprintf("rollup %s: target %s is not one of the inventory's targets", spec.Name, t))
			return c, out, true
		case !tc.State.Known():
			c, out = keep(tc.State, fmt.Sprintf("target %s is %s", t, tc.State))
			return c, out, false
		}
	}
	spec.Targets = sources
	res, err := rollup.Compute(spec, rows)
	if err != nil {
		c, out = keep(kollectv1.CoverageFailed, err.Error())
		return c, out, true
	}
	return export.Coverage{Target: spec.Name, State: kollectv1.CoverageComplete, Rows: int64(len(res.Rows)), ExtractionErrors: res.Skipped}, res.Rows, false
}

func targetNames(keys []collector.TargetKey) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.String()
	}
	return out
}
