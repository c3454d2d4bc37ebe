package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LocalObjectReference names an object in the same namespace as the referrer.
type LocalObjectReference struct {
	// Name of the referenced object.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// NamespacedObjectReference names an object in any namespace; cluster-scoped kinds use it.
type NamespacedObjectReference struct {
	// Name of the referenced object.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Namespace of the referenced object.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
}

// SecretReference names a Secret in the namespace of the object that refers to it. Kollect
// never reads Secrets across namespaces, so credentials stay with the team that owns them.
type SecretReference struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// SecretKeySelector picks one key of a Secret in the referrer's namespace.
type SecretKeySelector struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Key inside the Secret's data.
	// +kubebuilder:validation:MinLength=1
	Key string `json:"key"`
}

// TLSConfig configures the client side of a TLS connection to a sink.
type TLSConfig struct {
	// Enabled turns TLS on for protocols where it is optional (Kafka, NATS, PostgreSQL, MongoDB).
	// +optional
	Enabled bool `json:"enabled,omitempty"`
	// CASecretRef names a Secret key holding PEM certificates of the authorities to trust in
	// addition to the system pool (PostgreSQL: instead of it, as libpq's sslrootcert).
	// +optional
	CASecretRef *SecretKeySelector `json:"caSecretRef,omitempty"`
	// ClientCertSecretRef names a kubernetes.io/tls Secret (tls.crt, tls.key) for mutual TLS.
	// +optional
	ClientCertSecretRef *SecretReference `json:"clientCertSecretRef,omitempty"`
	// ServerName overrides the name checked against the server's certificate.
	// +optional
	ServerName string `json:"serverName,omitempty"`
	// InsecureSkipVerify disables certificate verification. For tests only: the agent refuses
	// it unless a KollectClusterScope selecting the sink's namespace sets allowInsecureSkipVerify.
	// +optional
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
}

// SinkStatus is the status every sink kind reports.
type SinkStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready reflects the last connection test.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Preview shows, without side effects, what an export would write.
	// +optional
	Preview *SinkPreview `json:"preview,omitempty"`
}

// SinkPreview describes what an export to the sink would do, computed without writing.
type SinkPreview struct {
	// Destination is the resolved location (repository and branch, bucket and prefix, table,
	// topic or subject) with templates expanded for this cluster.
	// +optional
	Destination string `json:"destination,omitempty"`
	// Paths are sample document paths or object keys (snapshot sinks).
	// +optional
	// +kubebuilder:validation:MaxItems=20
	Paths []string `json:"paths,omitempty"`
	// Message is a sample commit message (git) or message key (event sinks).
	// +optional
	Message string `json:"message,omitempty"`
	// Statements are the DDL statements the sink would run to provision its schema.
	// +optional
	// +kubebuilder:validation:MaxItems=20
	Statements []string `json:"statements,omitempty"`
}
