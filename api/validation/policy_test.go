package validation

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

func paths(ps []*field.Path) []string {
	out := []string{}
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}

func TestAmbientCredentials(t *testing.T) {
	for _, c := range []struct {
		name string
		spec map[string]any
		want []string
	}{
		{"s3 without secretRef", map[string]any{"s3": map[string]any{"bucket": "b"}}, []string{"spec.s3.secretRef"}},
		{"s3 with an endpoint still uses the default chain", map[string]any{"s3": map[string]any{"endpoint": "https://minio:9000"}}, []string{"spec.s3.secretRef"}},
		{"s3 with secretRef", map[string]any{"s3": map[string]any{"secretRef": map[string]any{"name": "k"}}}, []string{}},
		{"gcs without secretRef", map[string]any{"gcs": map[string]any{"bucket": "b"}}, []string{"spec.gcs.secretRef"}},
		{"gcs emulator endpoint", map[string]any{"gcs": map[string]any{"endpoint": "http://gcs:4443"}}, []string{}},
		{"bigquery without secretRef", map[string]any{"bigquery": map[string]any{"project": "p"}}, []string{"spec.bigquery.secretRef"}},
		{"azureblob always has a secretRef", map[string]any{"azureBlob": map[string]any{"account": "a", "container": "c"}}, []string{}},
		{"postgres always has a secretRef", map[string]any{"postgres": map[string]any{"host": "db"}}, []string{}},
	} {
		if got := paths(AmbientCredentials(field.NewPath("spec"), c.spec)); !slices.Equal(got, c.want) {
			t.Errorf("%s: AmbientCredentials = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestInsecureTLS(t *testing.T) {
	spec := map[string]any{
		"kafka":   map[string]any{"tls": map[string]any{"enabled": true, "insecureSkipVerify": true}},
		"mongodb": map[string]any{"tls": map[string]any{"insecureSkipVerify": false}},
		"list":    []any{map[string]any{"insecureSkipVerify": true}},
	}
	if got, want := rendered(InsecureTLS(field.NewPath("spec"), spec)), []string{
		"spec.kafka.tls.insecureSkipVerify set: the sink would not verify its server's certificate",
		"spec.list[0].insecureSkipVerify set: the sink would not verify its server's certificate",
	}; !slices.Equal(got, want) {
		t.Fatalf("InsecureTLS = %v, want %v", got, want)
	}
}

// TestInsecureTLSPostgresSSLMode: only verify-full (the default, also when unset) verifies the
// server without a CA of the sink's own; require and verify-ca do with one. Everything else
// needs the grant, with a message that says what the sink would do.
func TestInsecureTLSPostgresSSLMode(t *testing.T) {
	ca := map[string]any{"caSecretRef": map[string]any{"name": "pg-ca", "key": "ca.crt"}}
	const unverified = "the sink would not verify its server's certificate"
	for _, c := range []struct {
		mode string
		tls  map[string]any
		want []string
	}{
		{"", nil, []string{}},
		{"verify-full", nil, []string{}},
		{"verify-full", ca, []string{}},
		{"require", ca, []string{}},
		{"verify-ca", ca, []string{}},
		{"require", nil, []string{"spec.postgres.sslMode require without tls.caSecretRef: " + unverified}},
		{"require", map[string]any{"serverName": "db"}, []string{"spec.postgres.sslMode require without tls.caSecretRef: " + unverified}},
		{"verify-ca", nil, []string{"spec.postgres.sslMode verify-ca without tls.caSecretRef: the sink would accept any server with a certificate from a public authority, whatever its name"}},
		{"disable", nil, []string{"spec.postgres.sslMode disable: the sink would send its credentials and rows in plaintext, to a server it does not verify"}},
		{"prefer", ca, []string{"spec.postgres.sslMode prefer: the sink would send its credentials and rows in plaintext, to a server it does not verify"}},
		{"verify-full", map[string]any{"insecureSkipVerify": true}, []string{"spec.postgres.tls.insecureSkipVerify set: " + unverified}},
	} {
		pg := map[string]any{"host": "db", "secretRef": map[string]any{"name": "pg"}}
		if c.mode != "" {
			pg["sslMode"] = c.mode
		}
		if c.tls != nil {
			pg["tls"] = c.tls
		}
		if got := rendered(InsecureTLS(field.NewPath("spec"), map[string]any{"type": "postgres", "postgres": pg})); !slices.Equal(got, c.want) {
			t.Errorf("sslMode %q tls %v: InsecureTLS = %v, want %v", c.mode, c.tls, got, c.want)
		}
	}
}

// TestInsecureTLSKafkaPlain: SASL PLAIN sends the password itself, so without TLS it needs the
// grant; SCRAM, or PLAIN over TLS, does not.
func TestInsecureTLSKafkaPlain(t *testing.T) {
	on := map[string]any{"enabled": true}
	for _, c := range []struct {
		mech string
		tls  map[string]any
		want []string
	}{
		{"", nil, []string{}},
		{"SCRAM-SHA-512", nil, []string{}},
		{"PLAIN", on, []string{}},
		{"PLAIN", map[string]any{"caSecretRef": map[string]any{"name": "ca"}}, []string{}},
		{"PLAIN", nil, []string{"spec.kafka.saslMechanism PLAIN without TLS: the sink would send its SASL password in plaintext, to a broker it does not verify"}},
		{"PLAIN", map[string]any{"serverName": "k"}, []string{"spec.kafka.saslMechanism PLAIN without TLS: the sink would send its SASL password in plaintext, to a broker it does not verify"}},
	} {
		k := map[string]any{"brokers": []any{"k:9092"}, "topic": "t"}
		if c.mech != "" {
			k["saslMechanism"] = c.mech
		}
		if c.tls != nil {
			k["tls"] = c.tls
		}
		if got := rendered(InsecureTLS(field.NewPath("spec"), map[string]any{"type": "kafka", "kafka": k})); !slices.Equal(got, c.want) {
			t.Errorf("sasl %q tls %v: InsecureTLS = %v, want %v", c.mech, c.tls, got, c.want)
		}
	}
}

// TestInsecureTLSHTTPCredentials: a credential sent to an http:// URL of another machine needs
// the grant; https, a loopback host, no secretRef, or S3 (which signs and never sends its key)
// do not.
func TestInsecureTLSHTTPCredentials(t *testing.T) {
	const effect = ": the sink would send its credentials in plaintext HTTP, to a server it does not verify"
	ref := map[string]any{"name": "creds"}
	for _, c := range []struct {
		typ  string
		cfg  map[string]any
		want []string
	}{
		{"git", map[string]any{"url": "http://git.example/r.git", "secretRef": ref}, []string{"spec.git.url http:// with secretRef" + effect}},
		{"git", map[string]any{"url": "https://git.example/r.git", "secretRef": ref}, []string{}},
		{"git", map[string]any{"url": "http://git.example/r.git"}, []string{}},
		{"git", map[string]any{"url": "http://127.0.0.1:8080/r.git", "secretRef": ref}, []string{}},
		{"git", map[string]any{"url": "http://localhost/r.git", "secretRef": ref}, []string{}},
		{"gitlab", map[string]any{"url": "https://gl.example/g/p.git", "baseURL": "http://gl.example", "secretRef": ref},
			[]string{"spec.gitlab.baseURL http:// with secretRef" + effect}},
		{"gcs", map[string]any{"bucket": "b", "endpoint": "http://10.0.0.5:4443", "secretRef": ref}, []string{"spec.gcs.endpoint http:// with secretRef" + effect}},
		{"bigquery", map[string]any{"endpoint": "http://[::1]:9050", "secretRef": ref}, []string{}},
		{"azureBlob", map[string]any{"endpoint": "HTTP://blob.example/acct", "secretRef": ref}, []string{"spec.azureBlob.endpoint http:// with secretRef" + effect}},
		{"s3", map[string]any{"endpoint": "http://minio.example:9000", "secretRef": ref}, []string{}},
	} {
		if got := rendered(InsecureTLS(field.NewPath("spec"), map[string]any{"type": c.typ, c.typ: c.cfg})); !slices.Equal(got, c.want) {
			t.Errorf("%s %v: InsecureTLS = %v, want %v", c.typ, c.cfg, got, c.want)
		}
	}
}

// TestInsecureTLSNATS: NATS credentials over a plaintext connection to another machine need
// the grant; TLS (tls:// or a tls block), loopback, or no credentials do not.
func TestInsecureTLSNATS(t *testing.T) {
	ref := map[string]any{"name": "nats"}
	const want = "spec.nats.servers[1] nats:// with secretRef and without TLS: the sink would log in over plaintext (a token or password in the clear), to a server it does not verify"
	for _, c := range []struct {
		cfg  map[string]any
		want []string
	}{
		{map[string]any{"servers": []any{"nats://127.0.0.1:4222", "nats://nats.example:4222"}, "secretRef": ref}, []string{want}},
		{map[string]any{"servers": []any{"tls://nats.example:4222"}, "secretRef": ref}, []string{}},
		{map[string]any{"servers": []any{"nats://nats.example:4222"}, "secretRef": ref, "tls": map[string]any{"enabled": true}}, []string{}},
		{map[string]any{"servers": []any{"nats://localhost:4222"}, "secretRef": ref}, []string{}},
		{map[string]any{"servers": []any{"nats://nats.example:4222"}}, []string{}},
	} {
		if got := rendered(InsecureTLS(field.NewPath("spec"), map[string]any{"type": "nats", "nats": c.cfg})); !slices.Equal(got, c.want) {
			t.Errorf("%v: InsecureTLS = %v, want %v", c.cfg, got, c.want)
		}
	}
}

// TestInsecureTLSMongoPlain: authMechanism=PLAIN sends the password itself, so without TLS to
// another machine it needs the grant.
func TestInsecureTLSMongoPlain(t *testing.T) {
	const want = "spec.mongodb.uri authMechanism=PLAIN without TLS: the sink would send its password in plaintext (authMechanism PLAIN), to a server it does not verify"
	for _, c := range []struct {
		uri  string
		tls  map[string]any
		want []string
	}{
		{"mongodb://db:27017/?authMechanism=PLAIN", nil, []string{want}},
		{"mongodb://127.0.0.1:27017,db2:27017/?authMechanism=PLAIN", nil, []string{want}},
		{"mongodb://127.0.0.1:27017/?authMechanism=PLAIN", nil, []string{}},
		{"mongodb://db:27017/?authMechanism=PLAIN&tls=true", nil, []string{}},
		{"mongodb+srv://cluster.example/?authMechanism=PLAIN", nil, []string{}},
		{"mongodb+srv://cluster.example/?authMechanism=PLAIN&tls=false", nil, []string{want}},
		{"mongodb://db:27017/?authMechanism=PLAIN", map[string]any{"enabled": true}, []string{}},
		{"mongodb://db:27017/?authMechanism=SCRAM-SHA-256", nil, []string{}},
		{"mongodb://db:27017/", nil, []string{}},
	} {
		m := map[string]any{"uri": c.uri, "database": "inv"}
		if c.tls != nil {
			m["tls"] = c.tls
		}
		if got := rendered(InsecureTLS(field.NewPath("spec"), map[string]any{"type": "mongodb", "mongodb": m})); !slices.Equal(got, c.want) {
			t.Errorf("%s tls %v: InsecureTLS = %v, want %v", c.uri, c.tls, got, c.want)
		}
	}
}

// TestInsecureTLSMongoURI: the connection string options that turn verification off need the
// grant as tls.insecureSkipVerify does, in any case and whichever separator the driver reads.
func TestInsecureTLSMongoURI(t *testing.T) {
	for _, c := range []struct {
		uri  string
		want []string
	}{
		{"mongodb://db:27017/?replicaSet=rs0&tls=true", []string{}},
		{"mongodb://db:27017/?tlsInsecure=false", []string{}},
		{"mongodb://db:27017/", []string{}},
		{"mongodb://db:27017/?tls=true&tlsInsecure=true", []string{"spec.mongodb.uri tlsInsecure=true: the sink would not verify its server's certificate"}},
		{"mongodb://a:1,b:2/?tls=true;TLSALLOWINVALIDHOSTNAMES=TRUE&sslInsecure=true",
			[]string{"spec.mongodb.uri TLSALLOWINVALIDHOSTNAMES=true, sslInsecure=true: the sink would not verify its server's certificate"}},
		{"mongodb+srv://db.example/?tlsAllowInvalidCertificates=true", []string{"spec.mongodb.uri tlsAllowInvalidCertificates=true: the sink would not verify its server's certificate"}},
	} {
		spec := map[string]any{"type": "mongodb", "mongodb": map[string]any{"uri": c.uri, "database": "d"}}
		if got := rendered(InsecureTLS(field.NewPath("spec"), spec)); !slices.Equal(got, c.want) {
			t.Errorf("uri %s: InsecureTLS = %v, want %v", c.uri, got, c.want)
		}
	}
}

func rendered(us []Unverified) []string {
	out := []string{}
	for _, u := range us {
		out = append(out, u.String())
	}
	return out
}

// TestMongoDBPodFilesAndAmbient: options that read the pod's files or identity are PodFiles
// (always refused); MONGODB-AWS without a secretRef is ambient (a KollectClusterScope decides).
func TestMongoDBPodFilesAndAmbient(t *testing.T) {
	for _, c := range []struct {
		uri           string
		secretRef     bool
		files, remote []string
	}{
		{"mongodb://db/?tlsCAFile=/ca.pem", false, []string{"spec.mongodb.uri"}, []string{}},
		{"mongodb://db/?TLSCERTIFICATEKEYFILE=%2Fk.pem", true, []string{"spec.mongodb.uri"}, []string{}},
		{"mongodb://db/?ssl=true;sslCertificateAuthorityFile=/ca.pem", true, []string{"spec.mongodb.uri"}, []string{}},
		{"mongodb://db/?authMechanism=MONGODB-OIDC&authMechanismProperties=ENVIRONMENT:azure", true, []string{"spec.mongodb.uri"}, []string{}},
		{"mongodb://db/?authMechanism=GSSAPI", false, []string{"spec.mongodb.uri"}, []string{}},
		{"mongodb://db/?authMechanism=MONGODB-AWS", false, []string{}, []string{"spec.mongodb.secretRef"}},
		{"mongodb://db/?authMechanism=MONGODB-AWS", true, []string{}, []string{}},
		{"mongodb://db/?tls=true&authMechanism=SCRAM-SHA-256", true, []string{}, []string{}},
		{"mongodb://db/?appName=tlsCAFile", false, []string{}, []string{}},
	} {
		cfg := map[string]any{"uri": c.uri}
		if c.secretRef {
			cfg["secretRef"] = map[string]any{"name": "m"}
		}
		spec := map[string]any{"mongodb": cfg}
		if got := paths(PodFiles(field.NewPath("spec"), spec)); !slices.Equal(got, c.files) {
			t.Errorf("%s: PodFiles = %v, want %v", c.uri, got, c.files)
		}
		if got := paths(AmbientCredentials(field.NewPath("spec"), spec)); !slices.Equal(got, c.remote) {
			t.Errorf("%s (secretRef %v): AmbientCredentials = %v, want %v", c.uri, c.secretRef, got, c.remote)
		}
	}
}
