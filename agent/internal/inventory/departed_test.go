package inventory

import (
	"strings"
	"testing"

	"kollect.dev/agent/internal/collector"
	"kollect.dev/agent/internal/export"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// TestHeldDepartedKeepsOnlyDepartedTargetsRows: while a reference is unresolved, the rows of
// targets the inventory no longer names are held with failed coverage naming it; the named
// targets', a scope-denied target's and a rollup's rows are not; with every reference
// resolved nothing is held, so a removed reference's rows leave the snapshot.
func TestHeldDepartedKeepsOnlyDepartedTargetsRows(t *testing.T) {
	other, denied := collector.TargetKey{Namespace: "team", Name: "other"}, collector.TargetKey{Namespace: "team", Name: "secret"}
	from := export.NewSnapshot([]export.Row{
		{Origin: &export.Origin{Target: "team/cm"}, UID: "1"},
		{Origin: &export.Origin{Target: "team/cm"}, UID: "2"},
		{Origin: &export.Origin{Target: "nodes"}, UID: "3"},
		{Origin: &export.Origin{Target: "team/other"}, UID: "4"},
		{Origin: &export.Origin{Target: "team/secret"}, UID: "5"},
		{Origin: &export.Origin{Target: "sizes", Group: kollectv1.RollupGroup, Kind: kollectv1.RollupKind}, UID: "6"},
	})
	cfg := Config{Targets: []collector.TargetKey{other, {Namespace: "team", Name: "cm-typo"}},
		Denied: map[collector.TargetKey]TargetNote{denied: {State: kollectv1.CoverageDeniedByScope}}}

	rows, coverage, problems := heldDeparted(cfg, from, []string{"team/cm-typo"})
	if got := rowsByTarget(rows); len(got) != 2 || got["team/cm"] != 2 || got["nodes"] != 1 {
		t.Fatalf("held rows %v, want team/cm's 2 and nodes' 1", got)
	}
	if got := describeCoverage(coverage); got != "nodes=failed/1/0 team/cm=failed/2/0" {
		t.Fatalf("coverage %s", got)
	}
	for _, c := range coverage {
		if !strings.Contains(c.Reason, "team/cm-typo") {
			t.Fatalf("the reason does not name the unresolved reference: %s", c.Reason)
		}
	}
	if len(problems) != 2 || problems[0].Target != (collector.TargetKey{Name: "nodes"}) || problems[1].Target != (collector.TargetKey{Namespace: "team", Name: "cm"}) {
		t.Fatalf("problems %v", problems)
	}

	if rows, coverage, problems := heldDeparted(cfg, from, nil); rows != nil || coverage != nil || problems != nil {
		t.Fatalf("held with every reference resolved: %v %v %v", rows, coverage, problems)
	}
}

// TestUnresolvedTargetIsAFailedOneWithoutRows: only a failed target with no rows may be a
// renamed reference; a kind not served (an optional CRD) or a target keeping its rows is not.
func TestUnresolvedTargetIsAFailedOneWithoutRows(t *testing.T) {
	for _, tc := range []struct {
		c    export.Coverage
		want bool
	}{
		{export.Coverage{State: kollectv1.CoverageFailed}, true},
		{export.Coverage{State: kollectv1.CoverageFailed, Rows: 3}, false},
		{export.Coverage{State: kollectv1.CoverageKindNotServed}, false},
		{export.Coverage{State: kollectv1.CoverageForbidden}, false},
	} {
		if got := unresolvedTarget(tc.c); got != tc.want {
			t.Errorf("unresolvedTarget(%+v) = %v, want %v", tc.c, got, tc.want)
		}
	}
}
