package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DatabaseSinkType is the backend of a database sink.
// +kubebuilder:validation:Enum=postgres;mongodb;bigquery
type DatabaseSinkType string

// Database sink types.
const (
	DatabaseSinkPostgres DatabaseSinkType = "postgres"
	DatabaseSinkMongoDB  DatabaseSinkType = "mongodb"
	DatabaseSinkBigQuery DatabaseSinkType = "bigquery"
)

// PostgresSSLMode is libpq's sslmode.
// +kubebuilder:validation:Enum=disable;require;verify-ca;verify-full
type PostgresSSLMode string

// PostgresSinkConfig writes rows into PostgreSQL tables.
type PostgresSinkConfig struct {
	// Host of the server.
	// +kubebuilder:validation:MinLength=1
	Host string `json:"host"`
	// Port of the server.
	// +optional
	// +kubebuilder:default=5432
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`
	// Database name.
	// +kubebuilder:validation:MinLength=1
	Database string `json:"database"`
	// Schema holding Kollect's tables, created when missing.
	// +optional
	// +kubebuilder:default=kollect
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]{0,62}$`
	Schema string `json:"schema,omitempty"`
	// Table of rows; the state table is named <table>_state.
	// +optional
	// +kubebuilder:default=rows
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]{0,55}$`
	Table string `json:"table,omitempty"`
	// SSLMode as in libpq: verify-full (the default) checks the server's certificate and
	// name against the system roots, or against the CA of tls.caSecretRef when given; require
	// and verify-ca check the chain against that CA. disable (plaintext), and require or
	// verify-ca without tls.caSecretRef, verify no server: the agent refuses them unless a
	// KollectClusterScope selecting the sink's namespace sets allowInsecureSkipVerify.
	// +optional
	// +kubebuilder:default=verify-full
	SSLMode PostgresSSLMode `json:"sslMode,omitempty"`
	// SecretRef holds username and password.
	SecretRef SecretReference `json:"secretRef"`
	// TLS trusts a custom certificate authority (instead of the system roots, as libpq's
	// sslrootcert) and presents a client certificate.
	// +optional
	TLS *TLSConfig `json:"tls,omitempty"`
	// StatementTimeout bounds each statement; at least 1s (0s means the default).
	// +optional
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) == duration('0s') || duration(self) >= duration('1s')",message="statementTimeout must be at least 1s (0s means the default)"
	StatementTimeout metav1.Duration `json:"statementTimeout,omitempty"`
	// MaxConnections of the pool.
	// +optional
	// +kubebuilder:default=4
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	MaxConnections int32 `json:"maxConnections,omitempty"`
	// History keeps every version of every row of this agent's cluster in <table>_history,
	// each with the interval it was current (valid_from, valid_to; valid_to NULL while it
	// still is), written in the same transaction as the rows. Unchanged data writes no
	// history. <schema>.<table>_as_of(timestamptz) returns the rows current at a time, and
	// `kollect query --as-of` reads it. Turning it on seeds the history with the rows the
	// table holds at that time; turning it off stops recording (the history is kept), and
	// turning it on again first brings the history up to the rows as they are then.
	// +optional
	History bool `json:"history,omitempty"`
}

// MongoDBSinkConfig writes rows into a MongoDB collection.
type MongoDBSinkConfig struct {
	// URI of the deployment without credentials, for example mongodb://mongo:27017/?replicaSet=rs0.
	// +kubebuilder:validation:Pattern=`^mongodb(\+srv)?://.+`
	URI string `json:"uri"`
	// Database name.
	// +kubebuilder:validation:MinLength=1
	Database string `json:"database"`
	// Collection of rows; the state collection is named <collection>_state.
	// +optional
	// +kubebuilder:default=rows
	Collection string `json:"collection,omitempty"`
	// SecretRef holds username and password (and optionally authSource).
	// +optional
	SecretRef *SecretReference `json:"secretRef,omitempty"`
	// TLS configures the connection.
	// +optional
	TLS *TLSConfig `json:"tls,omitempty"`
}

// BigQuerySinkConfig writes rows into a BigQuery table.
type BigQuerySinkConfig struct {
	// Project that owns the dataset.
	// +kubebuilder:validation:MinLength=1
	Project string `json:"project"`
	// Dataset, created when missing.
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_]+$`
	Dataset string `json:"dataset"`
	// Table of rows; the state table is named <table>_state.
	// +optional
	// +kubebuilder:default=rows
	Table string `json:"table,omitempty"`
	// Location of the dataset.
	// +optional
	// +kubebuilder:default=US
	Location string `json:"location,omitempty"`
	// Endpoint overrides the API endpoint (emulators).
	// +optional
	// +kubebuilder:validation:Pattern=`^https?://.+`
	Endpoint string `json:"endpoint,omitempty"`
	// SecretRef holds a service-account key under key.json; without it (and without an
	// endpoint) the default credentials, the agent's own identity, are used where a
	// KollectClusterScope allows ambient credentials.
	// +optional
	SecretRef *SecretReference `json:"secretRef,omitempty"`
}

// KollectDatabaseSinkSpec configures a database. Exactly the block matching type is set.
// +kubebuilder:validation:XValidation:rule="(self.type == 'postgres') == has(self.postgres)",message="spec.postgres is required when type is postgres and forbidden otherwise"
// +kubebuilder:validation:XValidation:rule="(self.type == 'mongodb') == has(self.mongodb)",message="spec.mongodb is required when type is mongodb and forbidden otherwise"
// +kubebuilder:validation:XValidation:rule="(self.type == 'bigquery') == has(self.bigquery)",message="spec.bigquery is required when type is bigquery and forbidden otherwise"
type KollectDatabaseSinkSpec struct {
	// Type of the database.
	Type DatabaseSinkType `json:"type"`
	// Postgres configures type postgres.
	// +optional
	Postgres *PostgresSinkConfig `json:"postgres,omitempty"`
	// MongoDB configures type mongodb.
	// +optional
	MongoDB *MongoDBSinkConfig `json:"mongodb,omitempty"`
	// BigQuery configures type bigquery.
	// +optional
	BigQuery *BigQuerySinkConfig `json:"bigquery,omitempty"`
	// Timeout bounds one export; at least 1s (0s, which Go clients send for an unset value,
	// means the default).
	// +optional
	// +kubebuilder:default="2m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) == duration('0s') || duration(self) >= duration('1s')",message="timeout must be at least 1s (0s means the default)"
	Timeout metav1.Duration `json:"timeout,omitempty"`
}

// KollectDatabaseSink is a database that receives row diffs: postgres, mongodb or bigquery.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=kdb,categories=kollect
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type KollectDatabaseSink struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   KollectDatabaseSinkSpec `json:"spec"`
	Status SinkStatus              `json:"status,omitempty"`
}

// KollectDatabaseSinkList is a list of KollectDatabaseSink.
// +kubebuilder:object:root=true
type KollectDatabaseSinkList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KollectDatabaseSink `json:"items"`
}

func init() { register(&KollectDatabaseSink{}, &KollectDatabaseSinkList{}) }
