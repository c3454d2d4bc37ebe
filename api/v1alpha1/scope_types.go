package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GroupKindRule allows a kind, or every kind of a group with kind "*".
type GroupKindRule struct {
	// Group is the API group; empty for the core group, "*" for any group.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Group string `json:"group,omitempty"`
	// Kind is the kind, or "*" for every kind of the group.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind"`
}

// SinkRule allows sinks of one family (or all, "*") whose names match one of the patterns.
type SinkRule struct {
	// Family of the sinks, or "*" for every family.
	// +kubebuilder:validation:Enum=snapshot;database;event;"*"
	Family string `json:"family"`
	// Names are sink names or glob patterns; empty allows every name of the family.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	Names []string `json:"names,omitempty"`
}

// KollectScopeSpec says what Kollect objects in a namespace may do. An empty allowlist denies
// its whole category. Several scopes that apply to one namespace combine by intersection:
// something is allowed only if every scope allows it, and minimums take the largest value.
type KollectScopeSpec struct {
	// AllowedKinds are the kinds targets may watch.
	// +optional
	// +kubebuilder:validation:MaxItems=128
	AllowedKinds []GroupKindRule `json:"allowedKinds,omitempty"`
	// AllowedNamespaces are namespace names or glob patterns targets may reach ("*" for all).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	AllowedNamespaces []string `json:"allowedNamespaces,omitempty"`
	// AllowedSinks are the sinks inventories may export to.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	AllowedSinks []SinkRule `json:"allowedSinks,omitempty"`
	// AllowedDestinations restricts where the sinks of the namespaces this scope governs may
	// connect, beyond the agent's egress guard: a sink must name a host matching one of hosts,
	// or reach only addresses within cidrs (checked after DNS resolution, on every
	// connection). Unset: this scope does not restrict destinations. Several scopes combine by
	// intersection, so a KollectScope can only narrow its KollectClusterScope's list.
	// +optional
	AllowedDestinations *DestinationRules `json:"allowedDestinations,omitempty"`
	// MinDebounce is the smallest debounce an inventory may set.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	MinDebounce *metav1.Duration `json:"minDebounce,omitempty"`
	// MinResyncInterval is the smallest resyncInterval an inventory may set.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	MinResyncInterval *metav1.Duration `json:"minResyncInterval,omitempty"`
}

// DestinationRules lists where sinks may connect.
type DestinationRules struct {
	// Hosts are host names or glob patterns ("*.db.example.com", "kafka-?.corp.example"),
	// matched case-insensitively against the host a sink names (URL host, broker, server).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	Hosts []string `json:"hosts,omitempty"`
	// CIDRs are address ranges ("10.20.0.0/16", "fd00:1::/64"); every address a sink connects
	// to, whatever name it used, must lie in one of them unless its host matched hosts.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:Pattern=`^[0-9a-fA-F:.]+/[0-9]{1,3}$`
	CIDRs []string `json:"cidrs,omitempty"`
}

// KollectClusterScopeSpec is a scope for cluster-scoped Kollect objects and a ceiling over
// the namespaces it selects.
type KollectClusterScopeSpec struct {
	KollectScopeSpec `json:",inline"`
	// NamespaceSelector picks the namespaces this scope is a ceiling for; empty means every
	// namespace. Cluster-scoped Kollect objects are always governed.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	// AllowAmbientCredentials lets sinks in the namespaces this scope selects authenticate as
	// the agent itself: an s3 sink without secretRef (the AWS default credential chain), a gcs
	// or bigquery sink without secretRef and endpoint (Application Default Credentials).
	// Without it such a sink is refused, so a tenant cannot borrow the agent's cloud identity.
	// Every cluster scope that selects the sink's namespace must allow it; a KollectScope
	// cannot.
	// +optional
	AllowAmbientCredentials bool `json:"allowAmbientCredentials,omitempty"`
	// AllowInsecureSkipVerify lets sinks in the namespaces this scope selects connect without
	// verifying their server: tls.insecureSkipVerify, a postgres sslMode of disable
	// (plaintext), or require or verify-ca without tls.caSecretRef, and the mongodb uri
	// options tlsInsecure and tlsAllowInvalidCertificates/Hostnames. Every cluster scope that
	// selects the sink's namespace must allow it; a KollectScope cannot.
	// +optional
	AllowInsecureSkipVerify bool `json:"allowInsecureSkipVerify,omitempty"`
}

// KollectScopeStatus reports where the scope applies.
type KollectScopeStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready when the scope is in force.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Violations is the number of objects the scope currently degrades.
	// +optional
	Violations int32 `json:"violations,omitempty"`
}

// KollectScope is a tenant guardrail for the Kollect objects of one namespace.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=kscope,categories=kollect
// +kubebuilder:printcolumn:name="Violations",type=integer,JSONPath=`.status.violations`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type KollectScope struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   KollectScopeSpec   `json:"spec"`
	Status KollectScopeStatus `json:"status,omitempty"`
}

// KollectScopeList is a list of KollectScope.
// +kubebuilder:object:root=true
type KollectScopeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KollectScope `json:"items"`
}

// KollectClusterScope is a platform-wide guardrail: it governs cluster-scoped Kollect objects
// and caps what namespaced scopes can allow.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=kcscope,categories=kollect
// +kubebuilder:printcolumn:name="Violations",type=integer,JSONPath=`.status.violations`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type KollectClusterScope struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   KollectClusterScopeSpec `json:"spec"`
	Status KollectScopeStatus      `json:"status,omitempty"`
}

// KollectClusterScopeList is a list of KollectClusterScope.
// +kubebuilder:object:root=true
type KollectClusterScopeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KollectClusterScope `json:"items"`
}

func init() {
	register(&KollectScope{}, &KollectScopeList{}, &KollectClusterScope{}, &KollectClusterScopeList{})
}
