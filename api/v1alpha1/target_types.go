package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NamespaceSelection picks namespaces by name and by label. An object's namespace must pass
// include (when set), not match exclude, and match selector (when set).
// +kubebuilder:validation:XValidation:rule="!has(self.include) || !has(self.exclude) || self.include.all(n, !(n in self.exclude))",message="a namespace cannot be both included and excluded"
type NamespaceSelection struct {
	// Include lists namespace names or glob patterns (team-*). Empty means every namespace the
	// target may reach.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	Include []string `json:"include,omitempty"`
	// Exclude lists namespace names or glob patterns to leave out.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	Exclude []string `json:"exclude,omitempty"`
	// Selector matches namespace labels.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// NameSelection picks objects by name with glob patterns.
type NameSelection struct {
	// Include lists names or glob patterns (api-*); empty means every name.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	Include []string `json:"include,omitempty"`
	// Exclude lists names or glob patterns to leave out.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	Exclude []string `json:"exclude,omitempty"`
}

// TargetSelection narrows the objects of a profile's kind a target collects. Label and field
// selectors run on the API server; names and the CEL match run in the agent.
type TargetSelection struct {
	// Namespaces limits which namespaces objects are collected from. A KollectTarget collects
	// from its own namespace unless this says otherwise; a KollectClusterTarget from all.
	// Ignored for cluster-scoped kinds.
	// +optional
	Namespaces *NamespaceSelection `json:"namespaces,omitempty"`
	// LabelSelector is sent to the API server with the watch.
	// +optional
	LabelSelector *metav1.LabelSelector `json:"labelSelector,omitempty"`
	// FieldSelector is sent to the API server with the watch, for example status.phase=Running.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	FieldSelector string `json:"fieldSelector,omitempty"`
	// Names filters objects by name.
	// +optional
	Names *NameSelection `json:"names,omitempty"`
	// Match is a CEL expression over `object` that must return true for the object to be
	// collected, for example object.spec.replicas > 1.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Match string `json:"match,omitempty"`
}

// KollectTargetSpec says which objects to collect with which profile.
type KollectTargetSpec struct {
	// ProfileRef names a KollectProfile in this namespace.
	ProfileRef      LocalObjectReference `json:"profileRef"`
	TargetSelection `json:",inline"`
}

// KollectClusterTargetSpec says which objects, across the cluster, to collect with which profile.
type KollectClusterTargetSpec struct {
	// ProfileRef names a KollectProfile and its namespace.
	ProfileRef      NamespacedObjectReference `json:"profileRef"`
	TargetSelection `json:",inline"`
}

// KollectTargetStatus reports what a target collects.
type KollectTargetStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready when the watch is synced; Degraded with reason Forbidden when the agent
	// may not list or watch the kind (coverage unknown, rows kept), ExtractionFailed when
	// required attributes are missing, or a Scope* reason. SecretsConfined (True, reason
	// SecretExtractionOptIn) when the profile reads Secrets without decode: only Secrets of
	// namespaces labelled kollect.dev/secret-extraction=allow are read.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Resource is the resolved resource, for example deployments.v1.apps.
	// +optional
	Resource string `json:"resource,omitempty"`
	// ObjectCount is the number of objects the target currently selects.
	// +optional
	ObjectCount int64 `json:"objectCount,omitempty"`
	// ErrorCount is the number of selected objects whose extraction failed.
	// +optional
	ErrorCount int64 `json:"errorCount,omitempty"`
	// TruncatedCount is the number of selected objects exported cut to the profile's
	// fullObject.maxBytes.
	// +optional
	TruncatedCount int64 `json:"truncatedCount,omitempty"`
}

// KollectTarget selects objects in namespaces a team may reach and names the profile that
// extracts their rows.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ktgt,categories=kollect
// +kubebuilder:printcolumn:name="Profile",type=string,JSONPath=`.spec.profileRef.name`
// +kubebuilder:printcolumn:name="Resource",type=string,JSONPath=`.status.resource`,priority=1
// +kubebuilder:printcolumn:name="Objects",type=integer,JSONPath=`.status.objectCount`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type KollectTarget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   KollectTargetSpec   `json:"spec"`
	Status KollectTargetStatus `json:"status,omitempty"`
}

// KollectTargetList is a list of KollectTarget.
// +kubebuilder:object:root=true
type KollectTargetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KollectTarget `json:"items"`
}

// KollectClusterTarget selects objects across the cluster, including cluster-scoped kinds.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=kctgt,categories=kollect
// +kubebuilder:printcolumn:name="Profile",type=string,JSONPath=`.spec.profileRef.name`
// +kubebuilder:printcolumn:name="Resource",type=string,JSONPath=`.status.resource`,priority=1
// +kubebuilder:printcolumn:name="Objects",type=integer,JSONPath=`.status.objectCount`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type KollectClusterTarget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   KollectClusterTargetSpec `json:"spec"`
	Status KollectTargetStatus      `json:"status,omitempty"`
}

// KollectClusterTargetList is a list of KollectClusterTarget.
// +kubebuilder:object:root=true
type KollectClusterTargetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KollectClusterTarget `json:"items"`
}

func init() {
	register(&KollectTarget{}, &KollectTargetList{}, &KollectClusterTarget{}, &KollectClusterTargetList{})
}
