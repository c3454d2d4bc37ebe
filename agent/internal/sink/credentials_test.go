package sink

import (
	"slices"
	"strings"
	"testing"

	"kollect.dev/api/v1alpha1"
)

func TestInlineCredentials(t *testing.T) {
	snap := func(git *v1alpha1.GitSinkConfig) Object {
		return &v1alpha1.KollectSnapshotSink{Spec: v1alpha1.KollectSnapshotSinkSpec{Type: v1alpha1.SnapshotSinkGit, Git: git}}
	}
	for _, tc := range []struct {
		name string
		obj  Object
		want []string
	}{
		{"https without credentials", snap(&v1alpha1.GitSinkConfig{URL: "https://git.example.com/team/inv.git"}), nil},
		{"ssh user", snap(&v1alpha1.GitSinkConfig{URL: "ssh://git@git.example.com/team/inv.git"}), nil},
		{"scp-like user", snap(&v1alpha1.GitSinkConfig{URL: "git@git.example.com:team/inv.git"}), nil},
		{"author email is not a URL", snap(&v1alpha1.GitSinkConfig{URL: "https://git.example.com/x.git", AuthorEmail: "bot@example.com"}), nil},
		{"https password", snap(&v1alpha1.GitSinkConfig{URL: "https://bot:s3cret@git.example.com/inv.git"}), []string{"spec.git.url"}},
		{"https token as user", snap(&v1alpha1.GitSinkConfig{URL: "https://ghp_token@git.example.com/inv.git"}), []string{"spec.git.url"}},
		{"ssh password", snap(&v1alpha1.GitSinkConfig{URL: "ssh://git:s3cret@git.example.com/inv.git"}), []string{"spec.git.url"}},
		{"scp-like password", snap(&v1alpha1.GitSinkConfig{URL: "git:s3cret@git.example.com:inv.git"}), []string{"spec.git.url"}},
		{"nats servers", &v1alpha1.KollectEventSink{Spec: v1alpha1.KollectEventSinkSpec{Type: v1alpha1.EventSinkNATS,
			NATS: &v1alpha1.NATSSinkConfig{Servers: []string{"nats://a.example:4222", "nats://u:p@b.example:4222"}}}}, []string{"spec.nats.servers[1]"}},
		{"mongodb user only", &v1alpha1.KollectDatabaseSink{Spec: v1alpha1.KollectDatabaseSinkSpec{Type: v1alpha1.DatabaseSinkMongoDB,
			MongoDB: &v1alpha1.MongoDBSinkConfig{URI: "mongodb://CN=agent@db.example/?authMechanism=MONGODB-X509", Database: "d"}}}, nil},
		{"mongodb password", &v1alpha1.KollectDatabaseSink{Spec: v1alpha1.KollectDatabaseSinkSpec{Type: v1alpha1.DatabaseSinkMongoDB,
			MongoDB: &v1alpha1.MongoDBSinkConfig{URI: "mongodb://u:p@db.example/", Database: "d"}}}, []string{"spec.mongodb.uri"}},
		{"s3 endpoint", &v1alpha1.KollectSnapshotSink{Spec: v1alpha1.KollectSnapshotSinkSpec{Type: v1alpha1.SnapshotSinkS3,
			S3: &v1alpha1.S3SinkConfig{Bucket: "b", Endpoint: "https://AKIA:secret@s3.example.com"}}}, []string{"spec.s3.endpoint"}},
	} {
		paths, err := InlineCredentials(tc.obj)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, p := range paths {
			got = append(got, p.String())
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestInspectUnverifiedPostgres: the typed sink is read as the API server stores it, so an
// sslMode left empty (omitted) is the verify-full default and needs no grant, while disable
// and require without a CA are reported by field.
func TestInspectUnverifiedPostgres(t *testing.T) {
	pg := func(mode v1alpha1.PostgresSSLMode, tlsCfg *v1alpha1.TLSConfig) Object {
		return &v1alpha1.KollectDatabaseSink{Spec: v1alpha1.KollectDatabaseSinkSpec{Type: v1alpha1.DatabaseSinkPostgres,
			Postgres: &v1alpha1.PostgresSinkConfig{Host: "db", Database: "d", SSLMode: mode, TLS: tlsCfg, SecretRef: v1alpha1.SecretReference{Name: "pg"}}}}
	}
	ca := &v1alpha1.TLSConfig{CASecretRef: &v1alpha1.SecretKeySelector{Name: "ca", Key: "ca.crt"}}
	for _, tc := range []struct {
		name string
		obj  Object
		want []string
	}{
		{"default", pg("", nil), []string{}},
		{"require with a CA", pg("require", ca), []string{}},
		{"require", pg("require", nil), []string{"spec.postgres.sslMode require without tls.caSecretRef: the sink would not verify its server's certificate"}},
		{"disable", pg("disable", nil), []string{"spec.postgres.sslMode disable: the sink would send its credentials and rows in plaintext, to a server it does not verify"}},
	} {
		c, err := Inspect(tc.obj)
		if err != nil {
			t.Fatal(err)
		}
		if got := append([]string{}, Strings(c.Insecure)...); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestInspectKafkaPlainWithoutTLS: an event sink's SASL PLAIN over a plaintext connection is
// reported as the grant's business, as the typed object reaches the inspection.
func TestInspectKafkaPlainWithoutTLS(t *testing.T) {
	kafka := func(tlsCfg *v1alpha1.TLSConfig) Object {
		return &v1alpha1.KollectEventSink{Spec: v1alpha1.KollectEventSinkSpec{Type: v1alpha1.EventSinkKafka,
			Kafka: &v1alpha1.KafkaSinkConfig{Brokers: []string{"k:9092"}, Topic: "t", SASLMechanism: "PLAIN",
				SecretRef: &v1alpha1.SecretReference{Name: "kafka"}, TLS: tlsCfg}}}
	}
	c, err := Inspect(kafka(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := Strings(c.Insecure); len(got) != 1 || !strings.Contains(got[0], "spec.kafka.saslMechanism PLAIN without TLS") {
		t.Fatalf("PLAIN without TLS: %v", got)
	}
	if c, err = Inspect(kafka(&v1alpha1.TLSConfig{Enabled: true})); err != nil || len(c.Insecure) != 0 {
		t.Fatalf("PLAIN over TLS: %v %v", Strings(c.Insecure), err)
	}
}

// TestInspectHTTPCredentials: a typed sink whose credential would travel over plaintext HTTP
// to another machine is reported; the same sink on loopback (tests, demos) is not.
func TestInspectHTTPCredentials(t *testing.T) {
	gcs := func(endpoint string) Object {
		return &v1alpha1.KollectSnapshotSink{Spec: v1alpha1.KollectSnapshotSinkSpec{Type: v1alpha1.SnapshotSinkGCS,
			GCS: &v1alpha1.GCSSinkConfig{Bucket: "inv", Endpoint: endpoint, SecretRef: &v1alpha1.SecretReference{Name: "gcs-key"}}}}
	}
	c, err := Inspect(gcs("http://storage.internal:4443"))
	if err != nil {
		t.Fatal(err)
	}
	if got := Strings(c.Insecure); len(got) != 1 || !strings.Contains(got[0], "spec.gcs.endpoint http:// with secretRef") {
		t.Fatalf("GCS over plaintext HTTP: %v", got)
	}
	if c, err = Inspect(gcs("http://127.0.0.1:4443")); err != nil || len(c.Insecure) != 0 {
		t.Fatalf("GCS on loopback: %v %v", Strings(c.Insecure), err)
	}
}
