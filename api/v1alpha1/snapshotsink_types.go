package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SnapshotSinkType is the backend of a snapshot sink.
// +kubebuilder:validation:Enum=git;gitlab;s3;gcs;azureblob
type SnapshotSinkType string

// Snapshot sink types.
const (
	SnapshotSinkGit    SnapshotSinkType = "git"
	SnapshotSinkGitLab SnapshotSinkType = "gitlab"
	SnapshotSinkS3     SnapshotSinkType = "s3"
	SnapshotSinkGCS    SnapshotSinkType = "gcs"
	// SnapshotSinkAzureBlob stores documents as blobs in Azure Blob Storage.
	SnapshotSinkAzureBlob SnapshotSinkType = "azureblob"
)

// Format is how rows are serialized into documents.
// +kubebuilder:validation:Enum=yaml;json;ndjson;csv;parquet
type Format string

// Formats.
const (
	FormatYAML    Format = "yaml"
	FormatJSON    Format = "json"
	FormatNDJSON  Format = "ndjson"
	FormatCSV     Format = "csv"
	FormatParquet Format = "parquet"
)

// Compression of documents written to object stores.
// +kubebuilder:validation:Enum=none;gzip;zstd
type Compression string

// Compressions.
const (
	CompressionNone Compression = "none"
	CompressionGzip Compression = "gzip"
	CompressionZstd Compression = "zstd"
)

// LayoutMode decides how rows are split into documents.
// +kubebuilder:validation:Enum=document;perResource;byNamespace;byKind
type LayoutMode string

// Layout modes.
const (
	LayoutDocument    LayoutMode = "document"
	LayoutPerResource LayoutMode = "perResource"
	LayoutByNamespace LayoutMode = "byNamespace"
	LayoutByKind      LayoutMode = "byKind"
)

// Serialization is the document format of a snapshot sink.
type Serialization struct {
	// Format of the documents; yaml by default (readable diffs in git).
	// +optional
	// +kubebuilder:default=yaml
	Format Format `json:"format,omitempty"`
	// Compression applies to object stores (s3, gcs, azureblob) only.
	// +optional
	// +kubebuilder:default=none
	Compression Compression `json:"compression,omitempty"`
	// PromotedAttributes become typed Parquet or CSV columns of their own, in this order, in
	// addition to the attributes column.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	PromotedAttributes []string `json:"promotedAttributes,omitempty"`
}

// Layout decides which documents an export writes and where.
type Layout struct {
	// Mode: one document per inventory, one per resource, or split by namespace or kind.
	// +optional
	// +kubebuilder:default=document
	Mode LayoutMode `json:"mode,omitempty"`
	// PathTemplate is the document path relative to the sink's root. Placeholders:
	// {cluster}, {inventory}, {namespace}, {kind}, {name}, {ext}. Defaults per mode keep the
	// cluster first so many clusters can share one store.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.contains('{cluster}')",message="pathTemplate must contain {cluster} so clusters sharing a sink never overwrite each other"
	PathTemplate string `json:"pathTemplate,omitempty"`
}

// GitSinkConfig writes snapshots as commits to a git repository.
type GitSinkConfig struct {
	// URL of the repository: https://, ssh:// or file://.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:Pattern=`^(https?|ssh|file)://.+|^[^@\s]+@[^:\s]+:.+$`
	URL string `json:"url"`
	// Branch to commit to.
	// +optional
	// +kubebuilder:default=main
	Branch string `json:"branch,omitempty"`
	// CommitMessage is a template with {cluster}, {inventory}, {itemCount} and
	// {checksumShort}; the body always summarises rows added, removed and changed.
	// +optional
	// +kubebuilder:default="kollect: {cluster}/{inventory} ({itemCount} items, {checksumShort})"
	CommitMessage string `json:"commitMessage,omitempty"`
	// AuthorName of commits.
	// +optional
	// +kubebuilder:default=kollect
	AuthorName string `json:"authorName,omitempty"`
	// AuthorEmail of commits.
	// +optional
	// +kubebuilder:default="kollect@kollect.dev"
	AuthorEmail string `json:"authorEmail,omitempty"`
	// SecretRef holds credentials: token (HTTPS bearer/token), username and password (basic
	// auth), or ssh-privatekey and optionally known_hosts (SSH).
	// +optional
	SecretRef *SecretReference `json:"secretRef,omitempty"`
	// TLS trusts a custom certificate authority for HTTPS remotes.
	// +optional
	TLS *TLSConfig `json:"tls,omitempty"`
}

// GitLabMode is how the gitlab sink delivers commits.
// +kubebuilder:validation:Enum=push;mergeRequest
type GitLabMode string

// GitLab modes.
const (
	GitLabPush         GitLabMode = "push"
	GitLabMergeRequest GitLabMode = "mergeRequest"
)

// GitLabSinkConfig is a git sink on GitLab, with an optional merge-request mode.
type GitLabSinkConfig struct {
	GitSinkConfig `json:",inline"`
	// BaseURL of the GitLab instance for API calls, for self-hosted GitLab.
	// +optional
	// +kubebuilder:default="https://gitlab.com"
	BaseURL string `json:"baseURL,omitempty"`
	// Project is the project ID or full path (group/project) for API calls.
	// +kubebuilder:validation:MinLength=1
	Project string `json:"project"`
	// Mode: push commits to branch, or keep one stable branch and one merge request per
	// inventory, updated in place.
	// +optional
	// +kubebuilder:default=push
	Mode GitLabMode `json:"mode,omitempty"`
}

// ServerSideEncryption for S3 objects.
// +kubebuilder:validation:Enum=AES256;aws:kms
type ServerSideEncryption string

// S3SinkConfig writes snapshots as objects to an S3-compatible store.
// +kubebuilder:validation:XValidation:rule="!has(self.kmsKeyID) || (has(self.serverSideEncryption) && self.serverSideEncryption == 'aws:kms')",message="kmsKeyID requires serverSideEncryption aws:kms"
type S3SinkConfig struct {
	// Bucket name.
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	Bucket string `json:"bucket"`
	// Prefix of every key.
	// +optional
	Prefix string `json:"prefix,omitempty"`
	// Region of the bucket.
	// +optional
	// +kubebuilder:default=us-east-1
	Region string `json:"region,omitempty"`
	// Endpoint overrides the service endpoint (S3-compatible stores).
	// +optional
	// +kubebuilder:validation:Pattern=`^https?://.+`
	Endpoint string `json:"endpoint,omitempty"`
	// UsePathStyle addresses buckets as a path instead of a host name.
	// +optional
	UsePathStyle bool `json:"usePathStyle,omitempty"`
	// ServerSideEncryption asks the store to encrypt objects.
	// +optional
	ServerSideEncryption ServerSideEncryption `json:"serverSideEncryption,omitempty"`
	// KMSKeyID is the KMS key for aws:kms encryption.
	// +optional
	KMSKeyID string `json:"kmsKeyID,omitempty"`
	// SecretRef holds static keys (accessKeyID, secretAccessKey, optional sessionToken);
	// without it the default credential chain (the agent's own identity) is used, where a
	// KollectClusterScope allows ambient credentials.
	// +optional
	SecretRef *SecretReference `json:"secretRef,omitempty"`
	// TLS trusts a custom certificate authority.
	// +optional
	TLS *TLSConfig `json:"tls,omitempty"`
}

// GCSSinkConfig writes snapshots as objects to Google Cloud Storage.
type GCSSinkConfig struct {
	// Bucket name.
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=222
	Bucket string `json:"bucket"`
	// Prefix of every object name.
	// +optional
	Prefix string `json:"prefix,omitempty"`
	// Endpoint overrides the JSON API endpoint (emulators, private endpoints).
	// +optional
	// +kubebuilder:validation:Pattern=`^https?://.+`
	Endpoint string `json:"endpoint,omitempty"`
	// SecretRef holds a service-account key under key.json; without it (and without an
	// endpoint) the default credentials, the agent's own identity, are used where a
	// KollectClusterScope allows ambient credentials.
	// +optional
	SecretRef *SecretReference `json:"secretRef,omitempty"`
}

// AzureBlobSinkConfig writes snapshots as blobs (block blobs) to a container of an Azure
// Storage account.
type AzureBlobSinkConfig struct {
	// Account is the storage account name: 3 to 24 lowercase letters and digits.
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=24
	// +kubebuilder:validation:Pattern=`^[a-z0-9]+$`
	Account string `json:"account"`
	// Container is the blob container, which must exist: 3 to 63 lowercase letters, digits
	// and single hyphens, starting and ending with a letter or digit. "{cluster}" in it is
	// replaced with the agent's cluster name (`kollect-{cluster}` is `kollect-east` for the
	// agent of cluster east), so each cluster writes a container of its own and a container
	// shared access signature per cluster lets each cluster's credential write its own
	// container only; without it every cluster writes this one container. The name with the
	// cluster in place must be a valid container name; the agent's admission webhook checks
	// it with its cluster name.
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^([a-z0-9]|\{cluster\})(([a-z0-9-]|\{cluster\})*([a-z0-9]|\{cluster\}))?$`
	// +kubebuilder:validation:XValidation:rule="!self.contains('--')",message="container names have no consecutive hyphens"
	Container string `json:"container"`
	// Prefix of every blob name.
	// +optional
	Prefix string `json:"prefix,omitempty"`
	// Endpoint overrides the account's blob service URL (https://ACCOUNT.blob.core.windows.net
	// by default): a sovereign cloud's (https://ACCOUNT.blob.core.usgovcloudapi.net), a private
	// endpoint, or the Azure Storage emulator's path-style URL
	// (http://127.0.0.1:10000/devstoreaccount1). Never a shared access signature: that
	// belongs in the Secret.
	// +optional
	// +kubebuilder:validation:Pattern=`^https?://.+`
	Endpoint string `json:"endpoint,omitempty"`
	// SecretRef names the Secret with the credential: sasToken (a shared access signature
	// with read, add, create, write, delete and list permissions on the container, with or
	// without its leading "?") or accountKey (the account's shared key). Exactly one of the
	// two.
	SecretRef SecretReference `json:"secretRef"`
	// TLS trusts a custom certificate authority (a private endpoint or an emulator with a
	// certificate of its own).
	// +optional
	TLS *TLSConfig `json:"tls,omitempty"`
}

// KollectSnapshotSinkSpec configures a snapshot store. Exactly the block matching type is set.
// +kubebuilder:validation:XValidation:rule="(self.type == 'git') == has(self.git)",message="spec.git is required when type is git and forbidden otherwise"
// +kubebuilder:validation:XValidation:rule="(self.type == 'gitlab') == has(self.gitlab)",message="spec.gitlab is required when type is gitlab and forbidden otherwise"
// +kubebuilder:validation:XValidation:rule="(self.type == 's3') == has(self.s3)",message="spec.s3 is required when type is s3 and forbidden otherwise"
// +kubebuilder:validation:XValidation:rule="(self.type == 'gcs') == has(self.gcs)",message="spec.gcs is required when type is gcs and forbidden otherwise"
// +kubebuilder:validation:XValidation:rule="(self.type == 'azureblob') == has(self.azureBlob)",message="spec.azureBlob is required when type is azureblob and forbidden otherwise"
// +kubebuilder:validation:XValidation:rule="!has(self.serialization) || !has(self.serialization.compression) || self.serialization.compression == 'none' || self.type in ['s3', 'gcs', 'azureblob']",message="compression is only supported by s3, gcs and azureblob sinks"
type KollectSnapshotSinkSpec struct {
	// Type of the store.
	Type SnapshotSinkType `json:"type"`
	// Git configures type git.
	// +optional
	Git *GitSinkConfig `json:"git,omitempty"`
	// GitLab configures type gitlab.
	// +optional
	GitLab *GitLabSinkConfig `json:"gitlab,omitempty"`
	// S3 configures type s3.
	// +optional
	S3 *S3SinkConfig `json:"s3,omitempty"`
	// GCS configures type gcs.
	// +optional
	GCS *GCSSinkConfig `json:"gcs,omitempty"`
	// AzureBlob configures type azureblob.
	// +optional
	AzureBlob *AzureBlobSinkConfig `json:"azureBlob,omitempty"`
	// Serialization of documents.
	// +optional
	Serialization Serialization `json:"serialization,omitempty"`
	// Layout of documents.
	// +optional
	Layout Layout `json:"layout,omitempty"`
	// Timeout bounds one export; at least 1s (0s, which Go clients send for an unset value,
	// means the default).
	// +optional
	// +kubebuilder:default="2m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) == duration('0s') || duration(self) >= duration('1s')",message="timeout must be at least 1s (0s means the default)"
	Timeout metav1.Duration `json:"timeout,omitempty"`
}

// KollectSnapshotSink is a store of snapshot documents: git, gitlab, s3, gcs or azureblob.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ksnap,categories=kollect
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Format",type=string,JSONPath=`.spec.serialization.format`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type KollectSnapshotSink struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   KollectSnapshotSinkSpec `json:"spec"`
	Status SinkStatus              `json:"status,omitempty"`
}

// KollectSnapshotSinkList is a list of KollectSnapshotSink.
// +kubebuilder:object:root=true
type KollectSnapshotSinkList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KollectSnapshotSink `json:"items"`
}

func init() { register(&KollectSnapshotSink{}, &KollectSnapshotSinkList{}) }
