package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SinkFamily groups sink kinds by what they receive.
// +kubebuilder:validation:Enum=snapshot;database;event
type SinkFamily string

// Sink families.
const (
	SinkFamilySnapshot SinkFamily = "snapshot"
	SinkFamilyDatabase SinkFamily = "database"
	SinkFamilyEvent    SinkFamily = "event"
)

// SinkReferences lists the sinks of an inventory, one list per family, in the inventory's
// namespace.
type SinkReferences struct {
	// Snapshot names KollectSnapshotSinks (git, gitlab, s3, gcs).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Snapshot []LocalObjectReference `json:"snapshot,omitempty"`
	// Database names KollectDatabaseSinks (postgres, mongodb, bigquery).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Database []LocalObjectReference `json:"database,omitempty"`
	// Event names KollectEventSinks (kafka, nats).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Event []LocalObjectReference `json:"event,omitempty"`
}

// ClusterSinkReferences lists the sinks of a cluster inventory, one list per family.
type ClusterSinkReferences struct {
	// Snapshot names KollectSnapshotSinks.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	Snapshot []NamespacedObjectReference `json:"snapshot,omitempty"`
	// Database names KollectDatabaseSinks.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	Database []NamespacedObjectReference `json:"database,omitempty"`
	// Event names KollectEventSinks.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	Event []NamespacedObjectReference `json:"event,omitempty"`
}

// ExportTiming controls when an inventory exports. A change starts a trailing debounce: the
// export runs once no change arrived for debounce, or at the latest maxDelay after the first
// unexported change, so data is never staler than maxDelay under constant churn.
type ExportTiming struct {
	// Debounce is the quiet period after the last change before exporting.
	// +optional
	// +kubebuilder:default="5s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	Debounce metav1.Duration `json:"debounce,omitempty"`
	// MaxDelay bounds how long a change may wait for export; at least 1s. 0s (which Go clients
	// send for an unset value) allows only debounce 0s: export right after every change.
	// +optional
	// +kubebuilder:default="1m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) == duration('0s') || duration(self) >= duration('1s')",message="maxDelay must be at least 1s (or 0s, with debounce 0s: export right after every change)"
	MaxDelay metav1.Duration `json:"maxDelay,omitempty"`
	// ResyncInterval, when set, re-sends the full snapshot to every sink at this interval even
	// if nothing changed (for sinks that may be edited by others). Off by default; at least 10s.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s')",message="resyncInterval must be at least 10s"
	ResyncInterval *metav1.Duration `json:"resyncInterval,omitempty"`
	// ConfirmInterval is how often the agent confirms, while nothing changes, that each sink
	// still holds the current snapshot: the agent is alive, the watches are synced and the
	// checksum matches. Confirmation writes no row: at most one small state write per sink per
	// interval (postgres: confirmed_at in the state table), or only a connection test where
	// the sink keeps no state for it. Freshness is the age of the confirmation, not of the last
	// change. Default 5m; 0s turns it off; at least 10s otherwise.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) == duration('0s') || duration(self) >= duration('10s')",message="confirmInterval must be 0s (off) or at least 10s"
	ConfirmInterval *metav1.Duration `json:"confirmInterval,omitempty"`
}

// DefaultConfirmInterval is the confirmInterval of an inventory that does not set one.
const DefaultConfirmInterval = 5 * time.Minute

// DeletionPolicy says what deleting an inventory does to the data it exported.
// +kubebuilder:validation:Enum=Retain;Delete
type DeletionPolicy string

// Deletion policies.
const (
	// DeletionRetain keeps the rows in every sink; each target's coverage becomes retired and
	// confirmations stop, so readers see the rows are no longer kept current.
	DeletionRetain DeletionPolicy = "Retain"
	// DeletionDelete removes the inventory's rows and coverage from every sink (event sinks get
	// a tombstone per row); the sinks' state records stay, with no rows.
	DeletionDelete DeletionPolicy = "Delete"
)

// DefaultDeletionTimeout is the deletionTimeout of an inventory that does not set one.
const DefaultDeletionTimeout = 5 * time.Minute

// FinalizerRetire holds a deleted inventory until every sink took its last write (the retired
// coverage, or the removal of its rows), or its deletionTimeout passed. The agent adds it; an
// agent uninstalled before its inventories leaves it behind, and removing it by hand is safe.
const FinalizerRetire = "kollect.dev/retire-exports"

// InventoryDeletion is what deleting an inventory (or a bundle pruning it) does to its rows.
type InventoryDeletion struct {
	// DeletionPolicy is Retain (the default: rows stay, coverage says retired, confirmations
	// stop) or Delete (rows and coverage are removed from every sink, tombstones on event
	// sinks).
	// +optional
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`
	// DeletionTimeout bounds how long the agent holds the deleted inventory waiting for every
	// sink to take its last write (5m by default). After it the inventory goes, a Warning event
	// names the sinks that did not, and their data stays as it was.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('24h')",message="deletionTimeout must be between 0s and 24h"
	DeletionTimeout *metav1.Duration `json:"deletionTimeout,omitempty"`
}

// Policy returns the deletion policy, Retain when unset.
func (d InventoryDeletion) Policy() DeletionPolicy {
	if d.DeletionPolicy == "" {
		return DeletionRetain
	}
	return d.DeletionPolicy
}

// Timeout returns the deletion timeout, DefaultDeletionTimeout when unset.
func (d InventoryDeletion) Timeout() time.Duration {
	if d.DeletionTimeout == nil {
		return DefaultDeletionTimeout
	}
	return d.DeletionTimeout.Duration
}

// KollectInventorySpec aggregates targets into one canonical snapshot and exports it.
// +kubebuilder:validation:XValidation:rule="has(self.targets) || has(self.targetSelector)",message="set targets or targetSelector"
// +kubebuilder:validation:XValidation:rule="duration(self.debounce) <= duration(self.maxDelay)",message="debounce must not exceed maxDelay"
// +kubebuilder:validation:XValidation:rule="!has(self.rawRows) || self.rawRows == 'Include' || (has(self.rollups) && size(self.rollups) > 0)",message="rawRows Exclude needs at least one rollup: the inventory would export nothing"
type KollectInventorySpec struct {
	// Targets names KollectTargets in this namespace.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Targets []LocalObjectReference `json:"targets,omitempty"`
	// TargetSelector selects KollectTargets in this namespace by label, in addition to targets.
	// +optional
	TargetSelector *metav1.LabelSelector `json:"targetSelector,omitempty"`
	// Sinks receive the exports.
	// +optional
	Sinks             SinkReferences `json:"sinks,omitempty"`
	ExportTiming      `json:",inline"`
	InventoryDeletion `json:",inline"`
	InventoryRollups  `json:",inline"`
	// Suspend stops exports; collection continues so a resume is immediate.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// TargetKind names the kind of a target reference.
// +kubebuilder:validation:Enum=KollectTarget;KollectClusterTarget
type TargetKind string

// Target kinds.
const (
	TargetKindNamespaced TargetKind = "KollectTarget"
	TargetKindCluster    TargetKind = "KollectClusterTarget"
)

// ClusterTargetReference names a KollectClusterTarget or a KollectTarget in any namespace.
// +kubebuilder:validation:XValidation:rule="self.kind == 'KollectClusterTarget' ? !has(self.namespace) : has(self.namespace)",message="namespace is required for KollectTarget and forbidden for KollectClusterTarget"
type ClusterTargetReference struct {
	// Kind of the target.
	// +optional
	// +kubebuilder:default=KollectClusterTarget
	Kind TargetKind `json:"kind,omitempty"`
	// Name of the target.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Namespace of a KollectTarget.
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// KollectClusterInventorySpec aggregates targets from the whole cluster.
// +kubebuilder:validation:XValidation:rule="has(self.targets) || has(self.targetSelector)",message="set targets or targetSelector"
// +kubebuilder:validation:XValidation:rule="duration(self.debounce) <= duration(self.maxDelay)",message="debounce must not exceed maxDelay"
// +kubebuilder:validation:XValidation:rule="!has(self.rawRows) || self.rawRows == 'Include' || (has(self.rollups) && size(self.rollups) > 0)",message="rawRows Exclude needs at least one rollup: the inventory would export nothing"
// +kubebuilder:validation:XValidation:rule="!has(self.rollups) || !has(self.targets) || !self.rollups.exists(r, self.targets.exists(t, t.kind == 'KollectClusterTarget' && t.name == r.name))",message="a rollup cannot have the name of a cluster target: both would be the target of rows"
type KollectClusterInventorySpec struct {
	// Targets names cluster targets and namespaced targets.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Targets []ClusterTargetReference `json:"targets,omitempty"`
	// TargetSelector selects KollectClusterTargets by label, in addition to targets.
	// +optional
	TargetSelector *metav1.LabelSelector `json:"targetSelector,omitempty"`
	// Sinks receive the exports.
	// +optional
	Sinks             ClusterSinkReferences `json:"sinks,omitempty"`
	ExportTiming      `json:",inline"`
	InventoryDeletion `json:",inline"`
	InventoryRollups  `json:",inline"`
	// Suspend stops exports; collection continues so a resume is immediate.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// SinkExportStatus is the state of one sink of an inventory.
type SinkExportStatus struct {
	// Family of the sink.
	Family SinkFamily `json:"family"`
	// Name of the sink.
	Name string `json:"name"`
	// Namespace of the sink (cluster inventories).
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// Checksum of the last snapshot this sink accepted; an export is skipped while the
	// inventory's checksum equals it, also across agent restarts.
	// +optional
	Checksum string `json:"checksum,omitempty"`
	// Destination is a digest of the sink object's identity (its UID) and of the spec fields
	// that decide where and how rows land, for the destination Checksum was accepted into. When
	// the sink's destination no longer has this digest (bucket, table, repository, path template
	// or format edited, or the sink re-created under the same name), Checksum says nothing about
	// it and the next export there is a full one. Empty in statuses written before it existed.
	// +optional
	Destination string `json:"destination,omitempty"`
	// Coverage is a digest of the coverage the sink accepted with Checksum: when only the
	// coverage changes (a target turns forbidden, its rows kept), the sink is told.
	// +optional
	Coverage string `json:"coverage,omitempty"`
	// Rows is the item count of the last accepted export.
	// +optional
	Rows int64 `json:"rows,omitempty"`
	// LastExportTime is when the sink last accepted an export: when its content last changed.
	// +optional
	LastExportTime *metav1.Time `json:"lastExportTime,omitempty"`
	// LastConfirmTime is when the agent last confirmed that the sink holds the current
	// snapshot (an export confirms too): the time freshness is measured from. It keeps moving
	// while nothing changes and stops when the agent, its watches or the sink do.
	// +optional
	LastConfirmTime *metav1.Time `json:"lastConfirmTime,omitempty"`
	// LastAttemptTime is when the agent last called the sink, successfully or not: during an
	// outage it shows the agent still trying while LastExportTime stays put.
	// +optional
	LastAttemptTime *metav1.Time `json:"lastAttemptTime,omitempty"`
	// LastError is the error of the last failed attempt; cleared on success.
	// +optional
	LastError string `json:"lastError,omitempty"`
	// ErrorClass of the last error: transient (retried with backoff), terminal (retried after
	// ten minutes or a configuration change), or circuitOpen (transient errors kept failing and
	// the breaker opened: attempts wait its cooldown, one at a time).
	// +optional
	ErrorClass string `json:"errorClass,omitempty"`
}

// KollectInventoryStatus reports the snapshot and each sink's export state.
type KollectInventoryStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready, Synced (every sink holds the current checksum), Degraded.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ItemCount is the number of rows in the current snapshot.
	// +optional
	ItemCount int64 `json:"itemCount,omitempty"`
	// Checksum is the SHA-256 of the canonical snapshot.
	// +optional
	Checksum string `json:"checksum,omitempty"`
	// Targets is the number of targets the inventory aggregates.
	// +optional
	Targets int32 `json:"targets,omitempty"`
	// Coverage says, per target, how much of its objects the snapshot describes; every sink
	// stores it beside the rows.
	// +optional
	// +listType=map
	// +listMapKey=target
	Coverage []TargetCoverage `json:"coverage,omitempty"`
	// Sinks is the export state per sink.
	// +optional
	Sinks []SinkExportStatus `json:"sinks,omitempty"`
	// ResyncRequest is the value of the kollect.dev/resync-now annotation the agent acted on
	// last; a new value asks again.
	// +optional
	ResyncRequest string `json:"resyncRequest,omitempty"`
}

// KollectInventory aggregates targets of one namespace and exports their rows.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=kinv,categories=kollect
// +kubebuilder:printcolumn:name="Items",type=integer,JSONPath=`.status.itemCount`
// +kubebuilder:printcolumn:name="Checksum",type=string,JSONPath=`.status.checksum`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Synced",type=string,JSONPath=`.status.conditions[?(@.type=="Synced")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type KollectInventory struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   KollectInventorySpec   `json:"spec"`
	Status KollectInventoryStatus `json:"status,omitempty"`
}

// KollectInventoryList is a list of KollectInventory.
// +kubebuilder:object:root=true
type KollectInventoryList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KollectInventory `json:"items"`
}

// KollectClusterInventory aggregates targets across the cluster and exports their rows.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=kcinv,categories=kollect
// +kubebuilder:printcolumn:name="Items",type=integer,JSONPath=`.status.itemCount`
// +kubebuilder:printcolumn:name="Checksum",type=string,JSONPath=`.status.checksum`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Synced",type=string,JSONPath=`.status.conditions[?(@.type=="Synced")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type KollectClusterInventory struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   KollectClusterInventorySpec `json:"spec"`
	Status KollectInventoryStatus      `json:"status,omitempty"`
}

// KollectClusterInventoryList is a list of KollectClusterInventory.
// +kubebuilder:object:root=true
type KollectClusterInventoryList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KollectClusterInventory `json:"items"`
}

func init() {
	register(&KollectInventory{}, &KollectInventoryList{}, &KollectClusterInventory{}, &KollectClusterInventoryList{})
}
