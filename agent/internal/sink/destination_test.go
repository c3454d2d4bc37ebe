package sink

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"kollect.dev/api/v1alpha1"
)

// TestDestinationDigest: every field that decides where and how rows land changes the digest,
// the operational ones (timeouts, credentials, commit message) do not.
func TestDestinationDigest(t *testing.T) {
	snapshot := func() *v1alpha1.KollectSnapshotSink {
		return &v1alpha1.KollectSnapshotSink{ObjectMeta: metav1.ObjectMeta{UID: "u1", Name: "s"}, Spec: v1alpha1.KollectSnapshotSinkSpec{
			Type: v1alpha1.SnapshotSinkGit, Git: &v1alpha1.GitSinkConfig{URL: "file:///a.git", Branch: "main"},
		}}
	}
	azure := func() *v1alpha1.KollectSnapshotSink {
		return &v1alpha1.KollectSnapshotSink{ObjectMeta: metav1.ObjectMeta{UID: "u1", Name: "s"}, Spec: v1alpha1.KollectSnapshotSinkSpec{
			Type: v1alpha1.SnapshotSinkAzureBlob, AzureBlob: &v1alpha1.AzureBlobSinkConfig{Account: "fleetlake", Container: "inventory",
				SecretRef: v1alpha1.SecretReference{Name: "sas"}},
		}}
	}
	database := func() *v1alpha1.KollectDatabaseSink {
		return &v1alpha1.KollectDatabaseSink{ObjectMeta: metav1.ObjectMeta{UID: "u1", Name: "s"}, Spec: v1alpha1.KollectDatabaseSinkSpec{
			Type: v1alpha1.DatabaseSinkPostgres, Postgres: &v1alpha1.PostgresSinkConfig{Host: "db", Database: "inv", Table: "rows", SecretRef: v1alpha1.SecretReference{Name: "pg"}},
		}}
	}
	event := func() *v1alpha1.KollectEventSink {
		return &v1alpha1.KollectEventSink{ObjectMeta: metav1.ObjectMeta{UID: "u1", Name: "s"}, Spec: v1alpha1.KollectEventSinkSpec{
			Type: v1alpha1.EventSinkKafka, Kafka: &v1alpha1.KafkaSinkConfig{Brokers: []string{"k:9092"}, Topic: "rows"},
		}}
	}
	cases := []struct {
		name    string
		base    Object
		edit    func(Object)
		changes bool
	}{
		{"snapshot uid (re-created)", snapshot(), func(o Object) { o.SetUID(types.UID("u2")) }, true},
		{"snapshot url", snapshot(), func(o Object) { o.(*v1alpha1.KollectSnapshotSink).Spec.Git.URL = "file:///b.git" }, true},
		{"snapshot branch", snapshot(), func(o Object) { o.(*v1alpha1.KollectSnapshotSink).Spec.Git.Branch = "inv" }, true},
		{"snapshot path template", snapshot(), func(o Object) { o.(*v1alpha1.KollectSnapshotSink).Spec.Layout.PathTemplate = "x/{cluster}" }, true},
		{"snapshot layout", snapshot(), func(o Object) { o.(*v1alpha1.KollectSnapshotSink).Spec.Layout.Mode = v1alpha1.LayoutByKind }, true},
		{"snapshot format", snapshot(), func(o Object) { o.(*v1alpha1.KollectSnapshotSink).Spec.Serialization.Format = v1alpha1.FormatCSV }, true},
		{"snapshot compression", snapshot(), func(o Object) {
			o.(*v1alpha1.KollectSnapshotSink).Spec.Serialization.Compression = v1alpha1.CompressionGzip
		}, true},
		{"snapshot timeout", snapshot(), func(o Object) {
			o.(*v1alpha1.KollectSnapshotSink).Spec.Timeout = metav1.Duration{Duration: time.Minute}
		}, false},
		{"snapshot commit message", snapshot(), func(o Object) { o.(*v1alpha1.KollectSnapshotSink).Spec.Git.CommitMessage = "m" }, false},
		{"snapshot secret", snapshot(), func(o Object) {
			o.(*v1alpha1.KollectSnapshotSink).Spec.Git.SecretRef = &v1alpha1.SecretReference{Name: "new"}
		}, false},
		{"snapshot name only", snapshot(), func(o Object) { o.SetLabels(map[string]string{"a": "b"}) }, false},
		{"azureblob container", azure(), func(o Object) { o.(*v1alpha1.KollectSnapshotSink).Spec.AzureBlob.Container = "other" }, true},
		{"azureblob endpoint", azure(), func(o Object) {
			o.(*v1alpha1.KollectSnapshotSink).Spec.AzureBlob.Endpoint = "https://fleetlake.blob.core.usgovcloudapi.net"
		}, true},
		{"azureblob prefix", azure(), func(o Object) { o.(*v1alpha1.KollectSnapshotSink).Spec.AzureBlob.Prefix = "fleet/" }, true},
		{"azureblob secret", azure(), func(o Object) { o.(*v1alpha1.KollectSnapshotSink).Spec.AzureBlob.SecretRef.Name = "key" }, false},
		{"azureblob tls", azure(), func(o Object) {
			o.(*v1alpha1.KollectSnapshotSink).Spec.AzureBlob.TLS = &v1alpha1.TLSConfig{ServerName: "x"}
		}, false},
		{"database table", database(), func(o Object) { o.(*v1alpha1.KollectDatabaseSink).Spec.Postgres.Table = "rows2" }, true},
		{"database host", database(), func(o Object) { o.(*v1alpha1.KollectDatabaseSink).Spec.Postgres.Host = "db2" }, true},
		{"database schema", database(), func(o Object) { o.(*v1alpha1.KollectDatabaseSink).Spec.Postgres.Schema = "s2" }, true},
		{"database type", database(), func(o Object) {
			d := o.(*v1alpha1.KollectDatabaseSink)
			d.Spec.Type, d.Spec.Postgres, d.Spec.MongoDB = v1alpha1.DatabaseSinkMongoDB, nil, &v1alpha1.MongoDBSinkConfig{URI: "mongodb://db", Database: "inv"}
		}, true},
		{"database secret", database(), func(o Object) { o.(*v1alpha1.KollectDatabaseSink).Spec.Postgres.SecretRef.Name = "pg2" }, false},
		{"database max connections", database(), func(o Object) { o.(*v1alpha1.KollectDatabaseSink).Spec.Postgres.MaxConnections = 9 }, false},
		{"event topic", event(), func(o Object) { o.(*v1alpha1.KollectEventSink).Spec.Kafka.Topic = "rows2" }, true},
		{"event brokers", event(), func(o Object) { o.(*v1alpha1.KollectEventSink).Spec.Kafka.Brokers = []string{"k2:9092"} }, true},
		{"event mode", event(), func(o Object) { o.(*v1alpha1.KollectEventSink).Spec.Mode = v1alpha1.EventModeSnapshot }, true},
		{"event buffer size", event(), func(o Object) { o.(*v1alpha1.KollectEventSink).Spec.BufferSize = 5 }, false},
		{"event uid", event(), func(o Object) { o.SetUID("u3") }, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before, err := Destination(c.base)
			if err != nil {
				t.Fatal(err)
			}
			edited := c.base.DeepCopyObject().(Object)
			c.edit(edited)
			after, err := Destination(edited)
			if err != nil {
				t.Fatal(err)
			}
			if (before != after) != c.changes {
				t.Fatalf("digest changed %v, want %v", before != after, c.changes)
			}
			if again, _ := Destination(c.base); again != before {
				t.Fatal("the digest is not stable, or Destination modified its argument")
			}
		})
	}
}
