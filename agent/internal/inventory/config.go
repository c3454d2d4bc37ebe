package inventory

import (
	"time"

	"kollect.dev/agent/internal/collector"
	"kollect.dev/agent/internal/inventory/rollup"
	"kollect.dev/agent/internal/sink"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// Key identifies an inventory; Namespace is empty for a KollectClusterInventory.
type Key struct {
	Namespace, Name string
}

// String is the inventory's name in rows: namespace/name, or name for cluster inventories.
func (k Key) String() string {
	if k.Namespace == "" {
		return k.Name
	}
	return k.Namespace + "/" + k.Name
}

// SinkRef names a sink object.
type SinkRef struct {
	Family    kollectv1.SinkFamily
	Namespace string
	Name      string
}

// String renders family/namespace/name.
func (r SinkRef) String() string { return string(r.Family) + "/" + r.Namespace + "/" + r.Name }

// SinkBinding is one sink of an inventory, built by the controller from the sink object.
type SinkBinding struct {
	Ref SinkRef
	// ID changes whenever the sink must be rebuilt (its object's generation or UID changed).
	ID string
	// Credentials identifies how the sink connects: the Secret versions it was built with
	// and the scopes' allowedDestinations it dials under. When only they change, the worker
	// is replaced but what the sink accepted still holds: a new password, or a narrower
	// guard, reaches the same destination.
	Credentials string
	// Destination is the sink's destination digest (sink.Destination), recorded with the
	// accepted checksum.
	Destination string
	// Type is the sink's family/type (database/postgres), an attribute of its spans.
	Type    string
	Sink    sink.Sink
	Timeout time.Duration
	// Accepted is what the inventory's status says the sink accepted last, so a restart with
	// unchanged data exports nothing.
	Accepted     string
	AcceptedRows int
	AcceptedAt   time.Time
	// AcceptedCoverage is the digest of the coverage the status says the sink accepted.
	AcceptedCoverage string
	// ConfirmedAt is the sink's last confirmation the status records.
	ConfirmedAt time.Time
}

// TargetNote is what the controller knows of a target that the collector cannot say: why it
// is not collected (its object or profile is missing, its kind not served), or that a scope
// leaves it out. It becomes the target's coverage.
type TargetNote struct {
	State  kollectv1.CoverageState
	Reason string
}

// Config is the desired state of one inventory.
type Config struct {
	Key        Key
	Generation int64
	Targets    []collector.TargetKey
	Sinks      []SinkBinding
	Debounce   time.Duration
	MaxDelay   time.Duration
	Resync     time.Duration
	// Confirm is how often the sinks are confirmed while nothing changes; zero never.
	Confirm time.Duration
	Suspend bool
	// Notes explain targets of Targets the collector does not collect.
	Notes map[collector.TargetKey]TargetNote
	// Denied are the targets scopes leave out (not in Targets): their coverage says so, and
	// their rows leave the sinks.
	Denied map[collector.TargetKey]TargetNote
	// Rollups are exported beside the targets' rows, or instead of them with ExcludeRaw.
	Rollups    []rollup.Spec
	ExcludeRaw bool
	// Retire is set once the inventory is deleted: the last export applies this deletion
	// policy in every sink (see retire.go), ignoring Suspend, and no confirmation follows.
	Retire kollectv1.DeletionPolicy
}
