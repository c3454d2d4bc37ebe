package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AttributeType is the type an extracted value is coerced to.
// +kubebuilder:validation:Enum=string;int;float;bool;list;map;object
type AttributeType string

// Attribute types.
const (
	AttributeString AttributeType = "string"
	AttributeInt    AttributeType = "int"
	AttributeFloat  AttributeType = "float"
	AttributeBool   AttributeType = "bool"
	AttributeList   AttributeType = "list"
	AttributeMap    AttributeType = "map"
	AttributeObject AttributeType = "object"
)

// GroupVersionKind identifies the kind a profile extracts from.
type GroupVersionKind struct {
	// Group is the API group; empty for the core group.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Group string `json:"group,omitempty"`
	// Version is the API version, for example v1.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Version string `json:"version"`
	// Kind is the kind, for example Deployment.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Z][A-Za-z0-9]*$`
	Kind string `json:"kind"`
}

// Attribute is one named value extracted from every object, with exactly one of jsonPath or
// cel.
// +kubebuilder:validation:XValidation:rule="has(self.jsonPath) != has(self.cel)",message="exactly one of jsonPath or cel must be set"
type Attribute struct {
	// Name of the attribute in exported rows.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	Name string `json:"name"`
	// JSONPath is a kubectl-style JSONPath template, for example {.spec.replicas}. A path with
	// [*] yields a list.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	JSONPath string `json:"jsonPath,omitempty"`
	// CEL is a Common Expression Language expression over the variable `object`, with the
	// Kubernetes CEL libraries (lists, regex, quantity, url, ip) and the strings extension.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	CEL string `json:"cel,omitempty"`
	// Type the value is coerced to; a value that cannot be coerced is an extraction error.
	// +optional
	// +kubebuilder:default=string
	Type AttributeType `json:"type,omitempty"`
	// Optional attributes that are missing are left out of the row; a missing required
	// attribute is reported on the target instead of silently dropping the object.
	// +optional
	Optional bool `json:"optional,omitempty"`
	// Description documents the attribute for readers of the exported data.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Description string `json:"description,omitempty"`
}

// FullObject exports each whole object as one attribute, pruned of the fields that change on
// every write or only repeat what the API server already knows.
type FullObject struct {
	// Attribute is the name of the attribute that holds the object in exported rows. When the
	// agent cuts an object to MaxBytes, the attribute <attribute>Truncated lists the paths it
	// removed, so a reader of the sink sees that the object is incomplete.
	// +optional
	// +kubebuilder:default=object
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=54
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	Attribute string `json:"attribute,omitempty"`
	// Status keeps the object's .status. Off by default: status changes far more often than
	// the desired state, and every change is a row to export.
	// +optional
	Status bool `json:"status,omitempty"`
	// KeepManagedFields keeps metadata.managedFields, which the agent removes by default.
	// +optional
	KeepManagedFields bool `json:"keepManagedFields,omitempty"`
	// Prune lists more fields to remove, as dot-separated paths into the object (for example
	// spec.template.metadata.annotations or metadata.annotations.example\.com/checksum, with
	// \. for a dot inside a key). Removed by default: metadata.managedFields,
	// metadata.resourceVersion, metadata.selfLink and the annotation
	// kubectl.kubernetes.io/last-applied-configuration.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=512
	Prune []string `json:"prune,omitempty"`
	// MaxBytes caps the size of one exported object, in bytes of canonical JSON. A larger object
	// is cut, largest fields first (never apiVersion, kind, metadata.name or
	// metadata.namespace), and the cut is reported: in the row (<attribute>Truncated) and on the
	// target (truncatedCount and the Degraded condition, reason ObjectsTruncated).
	// +optional
	// +kubebuilder:default=65536
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=1048576
	MaxBytes int32 `json:"maxBytes,omitempty"`
}

// Decoder turns each object of a profile's kind into a decoded document before the
// attributes read it.
// +kubebuilder:validation:Enum=HelmRelease
type Decoder string

// Decoders.
const (
	// DecodeHelmRelease reads Helm's release Secrets (type helm.sh/release.v1).
	DecodeHelmRelease Decoder = "HelmRelease"
)

// ValuesExport says whether a decoded Helm release exports its values.
// +kubebuilder:validation:Enum=Omit;Redacted
type ValuesExport string

// Values exports.
const (
	// ValuesOmit leaves the release's values out of the decoded document.
	ValuesOmit ValuesExport = "Omit"
	// ValuesRedacted keeps the keys of the release's values and replaces every leaf value.
	ValuesRedacted ValuesExport = "Redacted"
)

// DecodeOptions tune a decoder.
type DecodeOptions struct {
	// Values says whether object.values holds the values the release was installed with
	// (helm get values): Omit (the default) leaves them out; Redacted keeps every key and list
	// length and replaces every leaf value with the string "<redacted>". Values are never
	// exported as they are.
	// +optional
	// +kubebuilder:default=Omit
	Values ValuesExport `json:"values,omitempty"`
}

// KollectProfileSpec says what to extract from objects of one kind.
// +kubebuilder:validation:XValidation:rule="(has(self.attributes) && size(self.attributes) > 0) || has(self.fullObject)",message="set attributes, fullObject or both"
// +kubebuilder:validation:XValidation:rule="!has(self.fullObject) || self.target.kind != 'Secret' || (has(self.target.group) && size(self.target.group) > 0)",message="fullObject cannot export Secrets: extract the fields you need with attributes"
// +kubebuilder:validation:XValidation:rule="!has(self.decode) || (self.target.version == 'v1' && self.target.kind == 'Secret' && (!has(self.target.group) || self.target.group.size() == 0))",message="decode HelmRelease reads Helm's release Secrets: set target to {version: v1, kind: Secret}"
// +kubebuilder:validation:XValidation:rule="!has(self.decodeOptions) || has(self.decode)",message="decodeOptions needs decode"
type KollectProfileSpec struct {
	// Target is the kind of object this profile reads.
	Target GroupVersionKind `json:"target"`
	// Attributes are the values extracted from every object; names are unique. Optional when
	// fullObject is set.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=128
	Attributes []Attribute `json:"attributes,omitempty"`
	// FullObject exports each whole object, pruned, beside the attributes. Secrets cannot be
	// exported whole: extract the fields you need with attributes instead.
	// +optional
	FullObject *FullObject `json:"fullObject,omitempty"`
	// Decode turns each object into a decoded document that the attributes read instead of
	// the object. HelmRelease (target v1 Secret) watches only Helm's release Secrets (field
	// selector type=helm.sh/release.v1) and gives one row per release, from its highest
	// revision: object.metadata {name (the release), namespace, uid, labels} and
	// object.release {name, namespace, chart, version, appVersion, status, revision, updated
	// (RFC 3339), description}. The Secret itself is dropped as soon as it is decoded. See
	// docs/helm-releases.md.
	// +optional
	Decode Decoder `json:"decode,omitempty"`
	// DecodeOptions tune the decoder; only with decode.
	// +optional
	DecodeOptions *DecodeOptions `json:"decodeOptions,omitempty"`
}

// KollectProfileStatus reports whether the profile compiled.
type KollectProfileStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready is False with reason CompileFailed and the compiler's message when an
	// expression does not compile.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// MetadataOnly is true when every attribute reads only metadata, so the agent can watch
	// object metadata instead of whole objects.
	// +optional
	MetadataOnly bool `json:"metadataOnly,omitempty"`
}

// KollectProfile declares what to extract from objects of one kind.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=kprof,categories=kollect
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=`.spec.target.kind`
// +kubebuilder:printcolumn:name="Group",type=string,JSONPath=`.spec.target.group`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type KollectProfile struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   KollectProfileSpec   `json:"spec"`
	Status KollectProfileStatus `json:"status,omitempty"`
}

// KollectProfileList is a list of KollectProfile.
// +kubebuilder:object:root=true
type KollectProfileList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KollectProfile `json:"items"`
}

func init() { register(&KollectProfile{}, &KollectProfileList{}) }
