package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EventSinkType is the backend of an event sink.
// +kubebuilder:validation:Enum=kafka;nats
type EventSinkType string

// Event sink types.
const (
	EventSinkKafka EventSinkType = "kafka"
	EventSinkNATS  EventSinkType = "nats"
)

// EventMode is what an event sink emits.
// +kubebuilder:validation:Enum=changes;snapshot
type EventMode string

// Event modes.
const (
	// EventModeChanges emits one change event per upserted or deleted row.
	EventModeChanges EventMode = "changes"
	// EventModeSnapshot emits the whole envelope, chunked under the message size limit.
	EventModeSnapshot EventMode = "snapshot"
)

// SASLMechanism for Kafka.
// +kubebuilder:validation:Enum=PLAIN;SCRAM-SHA-256;SCRAM-SHA-512
type SASLMechanism string

// KafkaSinkConfig emits events to a Kafka topic.
type KafkaSinkConfig struct {
	// Brokers are host:port seed addresses.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	Brokers []string `json:"brokers"`
	// Topic to produce to. "{cluster}" in it is replaced with the agent's cluster name
	// (`kollect.{cluster}.rows` is `kollect.east.rows` for the agent of cluster east), so
	// each cluster writes a topic of its own and the broker's ACLs can allow each cluster's
	// credentials to write its own topic only; without it every cluster writes this one
	// topic. The name with the cluster in place must be a valid Kafka topic name (at most
	// 249 of A-Z, a-z, 0-9, '.', '_', '-'); the agent's admission webhook checks it with
	// its cluster name.
	// +kubebuilder:validation:MaxLength=249
	// +kubebuilder:validation:Pattern=`^([A-Za-z0-9._-]|\{cluster\})+$`
	Topic string `json:"topic"`
	// Compression codec of produced batches.
	// +optional
	// +kubebuilder:default=zstd
	// +kubebuilder:validation:Enum=none;gzip;snappy;lz4;zstd
	Compression string `json:"compression,omitempty"`
	// SASL mechanism; credentials (username, password) come from secretRef.
	// +optional
	SASLMechanism SASLMechanism `json:"saslMechanism,omitempty"`
	// SecretRef holds SASL username and password.
	// +optional
	SecretRef *SecretReference `json:"secretRef,omitempty"`
	// TLS configures the connection.
	// +optional
	TLS *TLSConfig `json:"tls,omitempty"`
	// CreateTopic creates a compacted topic when it does not exist.
	// +optional
	CreateTopic bool `json:"createTopic,omitempty"`
	// Partitions of a created topic.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	Partitions int32 `json:"partitions,omitempty"`
}

// NATSSinkConfig emits events to NATS JetStream.
type NATSSinkConfig struct {
	// Servers are nats:// or tls:// URLs.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	Servers []string `json:"servers"`
	// Stream that captures the subjects.
	// +optional
	// +kubebuilder:default=KOLLECT
	Stream string `json:"stream,omitempty"`
	// SubjectTemplate with {cluster}, {inventory}, {kind}.
	// +optional
	// +kubebuilder:default="kollect.{cluster}.{inventory}.{kind}"
	SubjectTemplate string `json:"subjectTemplate,omitempty"`
	// CreateStream creates the stream when it does not exist.
	// +optional
	CreateStream bool `json:"createStream,omitempty"`
	// KVBucket, when set, also keeps the latest row per key in this key-value bucket.
	// +optional
	KVBucket string `json:"kvBucket,omitempty"`
	// SecretRef holds one of: user and password, token, nkey (seed), or creds (a creds file).
	// +optional
	SecretRef *SecretReference `json:"secretRef,omitempty"`
	// TLS configures the connection.
	// +optional
	TLS *TLSConfig `json:"tls,omitempty"`
}

// KollectEventSinkSpec configures an event emitter. Exactly the block matching type is set.
// +kubebuilder:validation:XValidation:rule="(self.type == 'kafka') == has(self.kafka)",message="spec.kafka is required when type is kafka and forbidden otherwise"
// +kubebuilder:validation:XValidation:rule="(self.type == 'nats') == has(self.nats)",message="spec.nats is required when type is nats and forbidden otherwise"
type KollectEventSinkSpec struct {
	// Type of the emitter.
	Type EventSinkType `json:"type"`
	// Mode: change events (default) or whole snapshots.
	// +optional
	// +kubebuilder:default=changes
	Mode EventMode `json:"mode,omitempty"`
	// Kafka configures type kafka.
	// +optional
	Kafka *KafkaSinkConfig `json:"kafka,omitempty"`
	// NATS configures type nats.
	// +optional
	NATS *NATSSinkConfig `json:"nats,omitempty"`
	// BufferSize bounds the change events held while the sink is unreachable; when full the
	// sink reports Degraded and falls back to a marked resync snapshot on recovery.
	// +optional
	// +kubebuilder:default=100000
	// +kubebuilder:validation:Minimum=100
	BufferSize int32 `json:"bufferSize,omitempty"`
	// Timeout bounds one export; at least 1s (0s, which Go clients send for an unset value,
	// means the default).
	// +optional
	// +kubebuilder:default="1m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) == duration('0s') || duration(self) >= duration('1s')",message="timeout must be at least 1s (0s means the default)"
	Timeout metav1.Duration `json:"timeout,omitempty"`
}

// KollectEventSink is a message broker that receives one event per changed row: kafka or nats.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=kevt,categories=kollect
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type KollectEventSink struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   KollectEventSinkSpec `json:"spec"`
	Status SinkStatus           `json:"status,omitempty"`
}

// KollectEventSinkList is a list of KollectEventSink.
// +kubebuilder:object:root=true
type KollectEventSinkList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KollectEventSink `json:"items"`
}

func init() { register(&KollectEventSink{}, &KollectEventSinkList{}) }
