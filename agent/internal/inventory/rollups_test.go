package inventory

import (
	"fmt"
	"strings"
	"testing"

	"kollect.dev/agent/internal/collector"
	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/inventory/rollup"
	kollectv1 "kollect.dev/api/v1alpha1"
)

func describeCoverage(c []export.Coverage) string {
	var parts []string
	for _, e := range export.NormalizeCoverage(c) {
		parts = append(parts, fmt.Sprintf("%s=%s/%d/%d", e.Target, e.State, e.Rows, e.ExtractionErrors))
	}
	return strings.Join(parts, " ")
}

func rowsByTarget(rows []export.Row) map[string]int {
	out := map[string]int{}
	for _, r := range rows {
		out[r.Target]++
	}
	return out
}

// TestRollupCoverageFollowsItsTargets: a rollup over complete targets is computed; over a
// target that is not complete it keeps its previous rows and takes that target's state; with
// ExcludeRaw only rollup rows remain and the raw targets' coverage counts none.
func TestRollupCoverageFollowsItsTargets(t *testing.T) {
	a, b := collector.TargetKey{Namespace: "team", Name: "a"}, collector.TargetKey{Namespace: "team", Name: "b"}
	raw := []export.Row{
		{Origin: &export.Origin{Target: "team/a"}, UID: "1", Attributes: []byte(`{"n":1}`)},
		{Origin: &export.Origin{Target: "team/a"}, UID: "2", Attributes: []byte(`{"n":"x"}`)},
		{Origin: &export.Origin{Target: "team/b"}, UID: "3", Attributes: []byte(`{"n":5}`)},
	}
	cfg := Config{Targets: []collector.TargetKey{a, b}, Rollups: []rollup.Spec{
		{Name: "all", Sum: []string{"n"}},
		{Name: "only-a", Targets: []string{"team/a"}},
	}}
	complete := func() []export.Coverage {
		return []export.Coverage{{Target: "team/a", State: kollectv1.CoverageComplete, Rows: 2}, {Target: "team/b", State: kollectv1.CoverageComplete, Rows: 1}}
	}
	rows, cov, problems := withRollups(cfg, append([]export.Row(nil), raw...), complete(), nil)
	if got, want := describeCoverage(cov), "all=complete/1/1 only-a=complete/1/0 team/a=complete/2/0 team/b=complete/1/0"; got != want || len(problems) > 0 {
		t.Fatalf("coverage %s (problems %v), want %s", got, problems, want)
	}
	if got := rowsByTarget(rows); got["all"] != 1 || got["only-a"] != 1 || got["team/a"] != 2 {
		t.Fatalf("rows per target %v", got)
	}
	prev := export.NewSnapshot(rows)

	// b syncs again: "all" keeps its row and says syncing; "only-a" does not read b.
	syncing := complete()
	syncing[1] = export.Coverage{Target: "team/b", State: kollectv1.CoverageSyncing, Reason: "waiting"}
	changed := append([]export.Row(nil), raw[:2]...)
	changed[0].Attributes = []byte(`{"n":100}`)
	rows, cov, problems = withRollups(cfg, changed, syncing, prev)
	if got, want := describeCoverage(cov), "all=syncing/1/0 only-a=complete/1/0 team/a=complete/2/0 team/b=syncing/0/0"; got != want || len(problems) > 0 {
		t.Fatalf("coverage %s (problems %v), want %s", got, problems, want)
	}
	for _, r := range rows {
		if r.Target == "all" && string(r.Attributes) != `{"count":3,"group":{},"sum":{"n":6}}` {
			t.Fatalf("the rollup over a syncing target was recomputed: %s", r.Attributes)
		}
	}

	// Raw rows excluded: rollups only; a rollup naming a target the inventory lacks fails.
	cfg.ExcludeRaw = true
	cfg.Rollups = append(cfg.Rollups, rollup.Spec{Name: "stray", Targets: []string{"team/z"}})
	rows, cov, problems = withRollups(cfg, append([]export.Row(nil), raw...), complete(), prev)
	if got := rowsByTarget(rows); len(got) != 2 || got["all"] != 1 || got["only-a"] != 1 {
		t.Fatalf("rows per target with ExcludeRaw: %v", got)
	}
	if got, want := describeCoverage(cov), "all=complete/1/1 only-a=complete/1/0 stray=failed/0/0 team/a=complete/0/0 team/b=complete/0/0"; got != want {
		t.Fatalf("coverage %s, want %s", got, want)
	}
	if len(problems) != 1 || problems[0].Target.Name != "stray" || !strings.Contains(problems[0].Reason, "team/z is not one of the inventory's targets") {
		t.Fatalf("problems %+v", problems)
	}
}

// TestRollupNamedLikeATargetYields: a cluster target selected under the rollup's name keeps
// its rows; the rollup exports nothing and says why.
func TestRollupNamedLikeATargetYields(t *testing.T) {
	cfg := Config{Targets: []collector.TargetKey{{Name: "deployments"}}, Rollups: []rollup.Spec{{Name: "deployments"}}}
	rows, cov, problems := withRollups(cfg, []export.Row{{Origin: &export.Origin{Target: "deployments"}, UID: "1"}},
		[]export.Coverage{{Target: "deployments", State: kollectv1.CoverageComplete, Rows: 1}}, nil)
	if len(rows) != 1 || rows[0].UID != "1" || len(problems) != 1 || len(cov) != 2 || cov[1].State != kollectv1.CoverageFailed {
		t.Fatalf("rows %v coverage %v problems %v", rows, cov, problems)
	}
}
