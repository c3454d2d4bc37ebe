package v1alpha1

// RollupGroup, RollupVersion and RollupKind are the synthetic identity of rollup rows: they
// are ordinary rows of the export contract whose target is the rollup's name.
const (
	RollupGroup   = "kollect.dev"
	RollupVersion = "v1alpha1"
	RollupKind    = "Rollup"
)

// RawRows says whether an inventory with rollups exports its targets' own rows too.
// +kubebuilder:validation:Enum=Include;Exclude
type RawRows string

// Raw row policies.
const (
	// RawRowsInclude exports every target's rows and the rollup rows beside them.
	RawRowsInclude RawRows = "Include"
	// RawRowsExclude exports only the rollup rows; coverage still lists every target.
	RawRowsExclude RawRows = "Exclude"
)

// Rollup is an aggregate computed at the edge: the rows of its targets grouped by some of
// their values, with a count and sums per group. Each group is one exported row whose target
// is the rollup's name, of kind kollect.dev/v1alpha1 Rollup, whose attributes are
// {"group": {…}, "count": n, "sum": {…}}. A change that leaves every total alone writes
// nothing.
// +kubebuilder:validation:XValidation:rule="!has(self.groupBy) || !self.groupBy.exists(g, g.startsWith('.') && self.groupBy.exists(h, '.' + h == g))",message="groupBy cannot hold both a built-in (.namespace) and an attribute of the same name (namespace): both are the group's key"
type Rollup struct {
	// Name of the rollup, a DNS label: the target of its rows in every sink.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// Targets the rollup aggregates, as the inventory names them: KollectTarget names in a
	// KollectInventory; in a KollectClusterInventory a cluster target's name or
	// namespace/name of a KollectTarget. Every target of the inventory when unset.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=317
	// +kubebuilder:validation:items:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	Targets []string `json:"targets,omitempty"`
	// GroupBy names the values rows are grouped by: attribute names of the targets' profiles,
	// or the built-ins .namespace, .kind, .group and .target (the row's own fields). A
	// list-valued attribute groups by each of its elements: a row with images [a, b] counts
	// in the group of a and in the group of b. A missing value (or an empty list) is null.
	// No groupBy: one row with the totals.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:Pattern=`^(\.(namespace|kind|group|target)|[A-Za-z_][A-Za-z0-9_]*)$`
	GroupBy []string `json:"groupBy,omitempty"`
	// Sum names numeric attributes summed per group, as sum.<attribute>. A value that is
	// missing or not a number is skipped and counted in the rollup's coverage
	// (extractionErrors); it never fails the export.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	Sum []string `json:"sum,omitempty"`
}

// InventoryRollups are the rollups of an inventory and whether its raw rows go with them.
// (The inventory specs validate that rawRows Exclude comes with a rollup.)
type InventoryRollups struct {
	// Rollups export aggregate rows (a count and sums per group) beside or instead of the
	// targets' rows; see docs/rollups.md.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Rollups []Rollup `json:"rollups,omitempty"`
	// RawRows is Include (the default: the targets' rows are exported beside the rollups) or
	// Exclude (only the rollup rows are exported).
	// +optional
	RawRows RawRows `json:"rawRows,omitempty"`
}

// ExcludesRaw reports whether only rollup rows are exported.
func (r InventoryRollups) ExcludesRaw() bool { return r.RawRows == RawRowsExclude }
