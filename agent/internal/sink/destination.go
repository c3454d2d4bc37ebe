package sink

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/api/v1alpha1"
)

// Destination is a digest of everything that decides where and how a sink's rows land: the
// sink object's kind and UID (a sink deleted and re-created under the same name is a new
// destination) and its spec — type, endpoint, bucket, prefix, table, repository, branch, path
// template, layout, format, compression, mode, topic, subject … — with only the fields left out
// that cannot change what the destination holds: timeouts, connection limits, credentials and
// TLS (a rotated Secret is the same destination), commit message and author, buffer size and
// the create-if-missing switches. A field added to a spec later counts by default, so a new
// setting can cost one full export but never leaves a destination unfilled.
//
// The agent remembers the checksum a sink accepted together with this digest (the inventory
// status); when the digest differs, the checksum says nothing about the new destination and the
// next export there is a full one.
func Destination(obj Object) (string, error) {
	var spec any
	switch s := obj.(type) {
	case *v1alpha1.KollectSnapshotSink:
		c := s.Spec.DeepCopy()
		c.Timeout = zeroDuration
		for _, g := range []*v1alpha1.GitSinkConfig{c.Git, gitOf(c.GitLab)} {
			if g != nil {
				g.CommitMessage, g.AuthorName, g.AuthorEmail, g.SecretRef, g.TLS = "", "", "", nil, nil
			}
		}
		if c.S3 != nil {
			c.S3.SecretRef, c.S3.TLS = nil, nil
		}
		if c.GCS != nil {
			c.GCS.SecretRef = nil
		}
		if c.AzureBlob != nil {
			c.AzureBlob.SecretRef, c.AzureBlob.TLS = v1alpha1.SecretReference{}, nil
		}
		spec = c
	case *v1alpha1.KollectDatabaseSink:
		c := s.Spec.DeepCopy()
		c.Timeout = zeroDuration
		if c.Postgres != nil {
			c.Postgres.SecretRef, c.Postgres.TLS = v1alpha1.SecretReference{}, nil
			c.Postgres.StatementTimeout, c.Postgres.MaxConnections = zeroDuration, 0
		}
		if c.MongoDB != nil {
			c.MongoDB.SecretRef, c.MongoDB.TLS = nil, nil
		}
		if c.BigQuery != nil {
			c.BigQuery.SecretRef = nil
		}
		spec = c
	case *v1alpha1.KollectEventSink:
		c := s.Spec.DeepCopy()
		c.Timeout, c.BufferSize = zeroDuration, 0
		if c.Kafka != nil {
			c.Kafka.SecretRef, c.Kafka.TLS, c.Kafka.CreateTopic, c.Kafka.Partitions = nil, nil, false, 0
		}
		if c.NATS != nil {
			c.NATS.SecretRef, c.NATS.TLS, c.NATS.CreateStream = nil, nil, false
		}
		spec = c
	default:
		return "", Terminalf("not a sink object: %T", obj)
	}
	b, err := json.Marshal(struct {
		Kind string `json:"kind"`
		UID  string `json:"uid"`
		Spec any    `json:"spec"`
	}{fmt.Sprintf("%T", obj), string(obj.GetUID()), spec})
	if err != nil {
		return "", fmt.Errorf("digest of the sink destination: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16]), nil
}

var zeroDuration metav1.Duration

func gitOf(g *v1alpha1.GitLabSinkConfig) *v1alpha1.GitSinkConfig {
	if g == nil {
		return nil
	}
	return &g.GitSinkConfig
}
