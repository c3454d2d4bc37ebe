package v1alpha1

// CoverageState says how much of one target's objects an inventory's rows describe. Sinks
// store it beside the rows, so a reader tells "these are all the objects" from "the agent
// could not see them" and never reads silence as deletion. The values are API: queries,
// alerts and the hub's rollout gate compare them.
// +kubebuilder:validation:Enum=complete;syncing;forbidden;kindNotServed;deniedByScope;failed;retired
type CoverageState string

// Coverage states.
const (
	// CoverageComplete: the target's watch is synced and every object it selects is in the
	// rows (objects whose extraction failed are counted in extractionErrors, not in the rows).
	CoverageComplete CoverageState = "complete"
	// CoverageSyncing: the watch is still listing. Rows exported earlier are kept as they were.
	CoverageSyncing CoverageState = "syncing"
	// CoverageForbidden: the agent may not list or watch the kind. Earlier rows are kept, and
	// are as old as the sink's change time says.
	CoverageForbidden CoverageState = "forbidden"
	// CoverageKindNotServed: the cluster does not serve the kind (a CRD not installed, an API
	// version removed). Earlier rows are kept.
	CoverageKindNotServed CoverageState = "kindNotServed"
	// CoverageDeniedByScope: a KollectScope does not permit the target. Its rows are removed
	// from the sinks: the team may not export them.
	CoverageDeniedByScope CoverageState = "deniedByScope"
	// CoverageFailed: the target is not collected for another reason (its profile or target
	// object is missing or invalid, its watch fails, its profile is quarantined), or it left the
	// inventory's targets while another reference cannot be resolved (a rename to a missing
	// name is not a removal); the reason says which. Earlier rows are kept.
	CoverageFailed CoverageState = "failed"
	// CoverageRetired: the inventory was deleted with deletionPolicy Retain. Its rows stay and
	// are no longer confirmed.
	CoverageRetired CoverageState = "retired"
)

// Known reports whether rows of a target in this state are the target's current objects.
func (s CoverageState) Known() bool { return s == CoverageComplete }

// TargetCoverage is one target's coverage in an inventory's current snapshot.
type TargetCoverage struct {
	// Target is the target's name in rows: namespace/name, or name for a cluster target.
	Target string `json:"target"`
	// State of the target's rows.
	State CoverageState `json:"state"`
	// Rows is the number of the target's rows in the snapshot, kept ones included.
	Rows int64 `json:"rows"`
	// ExtractionErrors counts objects the target selects whose extraction failed: they have
	// no row, and the target's Ready condition names a few.
	ExtractionErrors int64 `json:"extractionErrors"`
	// Reason explains a state other than complete.
	// +optional
	Reason string `json:"reason,omitempty"`
}
