package security

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"kollect.dev/testenv"
)

// servers are the real sink servers, each accepting the planted secret as its credential.
type servers struct {
	pg               *testenv.Postgres
	git              *testenv.GitHTTP
	s3               *testenv.S3
	kafka            *testenv.Kafka
	natsTok, natsPwd *testenv.NATS
	mongo            *testenv.Mongo
}

// Users of the servers; the secret is the password, token or secret key of each.
const (
	pgRole     = "kollect"
	gitUser    = "oauth2"
	s3Access   = "kollect-e2e"
	kafkaUser  = "kollect"
	natsUser   = "kollect"
	bucket     = "kollect-sec"
	closedPort = 1 // nothing listens on port 1 of loopback: connections are refused
)

// startServers starts every server at once; every one takes secret as its credential.
func startServers(t *testing.T, secret string) *servers {
	t.Helper()
	var s servers
	var mu sync.Mutex
	var errs []string
	var wg sync.WaitGroup
	start := func(name string, f func() (interface{ Stop() }, error)) {
		wg.Go(func() {
			p, err := f()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, name+": "+err.Error())
				return
			}
			t.Cleanup(p.Stop)
		})
	}
	start("postgres", func() (interface{ Stop() }, error) {
		var err error
		s.pg, err = testenv.StartPostgres()
		return s.pg, err
	})
	start("git http", func() (interface{ Stop() }, error) {
		var err error
		s.git, err = testenv.StartGitHTTP(gitUser, secret)
		return s.git, err
	})
	start("versitygw", func() (interface{ Stop() }, error) {
		var err error
		s.s3, err = testenv.StartS3With(testenv.S3Options{AccessKey: s3Access, SecretKey: secret})
		return s.s3, err
	})
	start("kfake", func() (interface{ Stop() }, error) {
		var err error
		s.kafka, err = testenv.StartKafka(testenv.KafkaOptions{User: kafkaUser, Password: secret})
		return s.kafka, err
	})
	start("nats-server (token)", func() (interface{ Stop() }, error) {
		var err error
		s.natsTok, err = testenv.StartNATS(testenv.NATSOptions{Token: secret})
		return s.natsTok, err
	})
	start("nats-server (user)", func() (interface{ Stop() }, error) {
		var err error
		s.natsPwd, err = testenv.StartNATS(testenv.NATSOptions{User: natsUser, Password: secret})
		return s.natsPwd, err
	})
	start("ferretdb", func() (interface{ Stop() }, error) {
		var err error
		s.mongo, err = testenv.StartMongo()
		return s.mongo, err
	})
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("starting the sink servers:\n%s", strings.Join(errs, "\n"))
	}
	ctx := context.Background()
	if err := s.pg.RequirePassword(ctx, pgRole, secret); err != nil {
		t.Fatal(err)
	}
	if _, err := s.git.InitBareRepo("inv.git"); err != nil {
		t.Fatal(err)
	}
	// The bucket, made as a user makes it: with s3cmd and the gateway's credentials.
	cfg := filepath.Join(t.TempDir(), "s3cfg")
	host := strings.TrimPrefix(s.s3.Endpoint, "http://")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("[default]\naccess_key = %s\nsecret_key = %s\nhost_base = %s\nhost_bucket = %s\n"+
		"use_https = False\nbucket_location = us-east-1\nsignature_v2 = False\n", s.s3.AccessKey, s.s3.SecretKey, host, host)), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, "s3cmd", "-c", cfg, "mb", "s3://"+bucket).CombinedOutput(); err != nil {
		t.Fatalf("s3cmd mb: %v: %s", err, strings.ReplaceAll(string(out), secret, "<secret>"))
	}
	return &s
}

// sinkCase is one sink object, the Secret it references (named after it) and what its Ready
// condition must come to say: that is the observable sign its probe (and, through the
// inventory, its exports) ran with the planted credential.
type sinkCase struct {
	name, kind string
	family     string // snapshot, database or event: where the inventory references it
	spec       string // YAML of the spec, one line
	secret     map[string]string
	ready      bool
	want       string // in the Ready message when not ready
	// inline marks a spec with the secret in a URL: the webhook must refuse it, and a copy
	// labelled to bypass the webhook must be refused when the agent builds the sink.
	inline bool
}

// sinkCases are every sink of the test. secret is the planted value; wrong is a credential the
// servers refuse that still contains it, so a leak of either is a hit.
func sinkCases(s *servers, secret, wrong string) []sinkCase {
	closed := fmt.Sprintf("127.0.0.1:%d", closedPort)
	gitSpec := func(url, ref string) string {
		return fmt.Sprintf(`{type: git, git: {url: %q, branch: main, secretRef: {name: %s}}}`, url, ref)
	}
	s3Spec := func(endpoint, ref string) string {
		return fmt.Sprintf(`{type: s3, s3: {bucket: %s, region: us-east-1, endpoint: %q, usePathStyle: true, secretRef: {name: %s}}}`, bucket, endpoint, ref)
	}
	pgSpec := func(host, ref string) string {
		return fmt.Sprintf(`{type: postgres, postgres: {host: %q, port: %d, database: postgres, schema: kollect, sslMode: disable, secretRef: {name: %s}}}`,
			host, s.pg.Port, ref)
	}
	mongoSpec := func(uri, ref string) string {
		return fmt.Sprintf(`{type: mongodb, mongodb: {uri: %q, database: kollect, secretRef: {name: %s}}}`, uri, ref)
	}
	kafkaSpec := func(broker, ref string) string {
		return fmt.Sprintf(`{type: kafka, timeout: 5s, kafka: {brokers: [%q], topic: kollect.rows, createTopic: true, saslMechanism: SCRAM-SHA-256, secretRef: {name: %s}}}`, broker, ref)
	}
	natsSpec := func(url, ref string) string {
		return fmt.Sprintf(`{type: nats, timeout: 5s, nats: {servers: [%q], stream: KOLLECT, createStream: true, secretRef: {name: %s}}}`, url, ref)
	}
	gitBasic := func(p string) map[string]string { return map[string]string{"username": gitUser, "password": p} }
	s3Keys := func(k string) map[string]string {
		return map[string]string{"accessKeyID": s3Access, "secretAccessKey": k}
	}
	login := func(u, p string) map[string]string { return map[string]string{"username": u, "password": p} }
	gitURL := s.git.URL + "/inv.git"
	natsHost := strings.TrimPrefix(s.natsTok.URL, "nats://")
	s3Host := strings.TrimPrefix(s.s3.Endpoint, "http://")
	gitHost := strings.TrimPrefix(s.git.URL, "http://")
	// A service-account key whose private key is the secret: unparsable, so the sink fails
	// when it builds its client, the path where a library may quote what it could not parse.
	saKey := fmt.Sprintf(`{"type":"service_account","client_email":"kollect@example.iam.gserviceaccount.com","private_key_id":"1","private_key":%q,"token_uri":"http://%s/token"}`, secret, closed)
	return []sinkCase{
		{name: "git-good", kind: "KollectSnapshotSink", family: "snapshot", spec: gitSpec(gitURL, "git-good"), secret: gitBasic(secret), ready: true},
		{name: "git-wrong", kind: "KollectSnapshotSink", family: "snapshot", spec: gitSpec(gitURL, "git-wrong"), secret: gitBasic(wrong), want: "credentials refused"},
		{name: "git-token-wrong", kind: "KollectSnapshotSink", family: "snapshot", spec: gitSpec(gitURL, "git-token-wrong"),
			secret: map[string]string{"token": wrong}, want: "credentials refused"},
		// A token as the user name, as GitHub takes a personal access token.
		{name: "git-token-as-user", kind: "KollectSnapshotSink", family: "snapshot", spec: gitSpec(gitURL, "git-token-as-user"),
			secret: map[string]string{"username": secret}, want: "credentials refused"},
		{name: "git-ssh-key", kind: "KollectSnapshotSink", family: "snapshot", spec: gitSpec("ssh://git@"+closed+"/inv.git", "git-ssh-key"),
			secret: map[string]string{"ssh-privatekey": "-----BEGIN OPENSSH PRIVATE KEY-----\n" + secret + "\n-----END OPENSSH PRIVATE KEY-----\n"}, want: "parsing ssh-privatekey"},
		// The git side accepts the token; the GitLab API (the git server, which has none)
		// refuses the request that carried the token in its PRIVATE-TOKEN header.
		{name: "gitlab-token", kind: "KollectSnapshotSink", family: "snapshot",
			spec:   fmt.Sprintf(`{type: gitlab, gitlab: {url: %q, baseURL: %q, project: team/inv, mode: push, branch: main, secretRef: {name: gitlab-token}}}`, gitURL, s.git.URL),
			secret: map[string]string{"username": gitUser, "token": secret}, want: "token refused"},
		{name: "s3-good", kind: "KollectSnapshotSink", family: "snapshot", spec: s3Spec(s.s3.Endpoint, "s3-good"), secret: s3Keys(secret), ready: true},
		{name: "s3-wrong", kind: "KollectSnapshotSink", family: "snapshot", spec: s3Spec(s.s3.Endpoint, "s3-wrong"), secret: s3Keys(wrong), want: "SignatureDoesNotMatch"},
		{name: "gcs-key", kind: "KollectSnapshotSink", family: "snapshot",
			spec:   fmt.Sprintf(`{type: gcs, gcs: {bucket: %s, endpoint: "http://%s", secretRef: {name: gcs-key}}}`, bucket, closed),
			secret: map[string]string{"key.json": saKey}, want: "failed to parse private key"},
		// azureblob: a shared access signature whose sig is the secret, sent to a closed port
		// (the error names the URL, never its query). One inventory takes at most 16
		// snapshot sinks, so the account key's case is the package's (TestProbeAndPreview).
		{name: "azure-sas", kind: "KollectSnapshotSink", family: "snapshot",
			spec:   fmt.Sprintf(`{type: azureblob, azureBlob: {account: kollectsec, container: %s, endpoint: "http://%s/kollectsec", secretRef: {name: azure-sas}}}`, bucket, closed),
			secret: map[string]string{"sasToken": "sv=2021-08-06&ss=b&srt=co&sp=racwdl&sig=" + secret}, want: "connection refused"},
		{name: "pg-good", kind: "KollectDatabaseSink", family: "database", spec: pgSpec("127.0.0.1", "pg-good"), secret: login(pgRole, secret), ready: true},
		{name: "pg-wrong", kind: "KollectDatabaseSink", family: "database", spec: pgSpec("127.0.0.1", "pg-wrong"), secret: login(pgRole, wrong),
			want: "password authentication failed"},
		{name: "mongo-secret", kind: "KollectDatabaseSink", family: "database", spec: mongoSpec(s.mongo.URI, "mongo-secret"), secret: login("kollect", secret),
			want: "AuthenticationFailed"},
		{name: "bq-key", kind: "KollectDatabaseSink", family: "database",
			spec:   fmt.Sprintf(`{type: bigquery, bigquery: {project: kollect-sec, dataset: kollect, endpoint: "http://%s", secretRef: {name: bq-key}}}`, closed),
			secret: map[string]string{"key.json": saKey}, want: "failed to parse private key"},
		{name: "kafka-good", kind: "KollectEventSink", family: "event", spec: kafkaSpec(s.kafka.Addr, "kafka-good"), secret: login(kafkaUser, secret), ready: true},
		{name: "kafka-wrong", kind: "KollectEventSink", family: "event", spec: kafkaSpec(s.kafka.Addr, "kafka-wrong"), secret: login(kafkaUser, wrong),
			want: "SASL SCRAM-SHA-256 credentials of Secret kafka-wrong"},
		// A client certificate whose key is the secret: unparsable, refused before dialling.
		{name: "kafka-tls-key", kind: "KollectEventSink", family: "event",
			spec: fmt.Sprintf(`{type: kafka, timeout: 5s, kafka: {brokers: [%q], topic: kollect.rows, tls: {enabled: true, clientCertSecretRef: {name: kafka-tls-key}}}}`, s.kafka.Addr),
			secret: map[string]string{"tls.crt": "-----BEGIN CERTIFICATE-----\n" + secret + "\n-----END CERTIFICATE-----\n",
				"tls.key": "-----BEGIN PRIVATE KEY-----\n" + secret + "\n-----END PRIVATE KEY-----\n"}, want: "client certificate in secret kafka-tls-key"},
		{name: "nats-token-good", kind: "KollectEventSink", family: "event", spec: natsSpec(s.natsTok.URL, "nats-token-good"),
			secret: map[string]string{"token": secret}, ready: true},
		{name: "nats-token-wrong", kind: "KollectEventSink", family: "event", spec: natsSpec(s.natsTok.URL, "nats-token-wrong"),
			secret: map[string]string{"token": wrong}, want: "authorization violation"},
		{name: "nats-user-good", kind: "KollectEventSink", family: "event", spec: natsSpec(s.natsPwd.URL, "nats-user-good"),
			secret: map[string]string{"user": natsUser, "password": secret}, ready: true},
		{name: "nats-user-wrong", kind: "KollectEventSink", family: "event", spec: natsSpec(s.natsPwd.URL, "nats-user-wrong"),
			secret: map[string]string{"user": natsUser, "password": wrong}, want: "authorization violation"},
		{name: "nats-nkey", kind: "KollectEventSink", family: "event", spec: natsSpec(s.natsTok.URL, "nats-nkey"),
			secret: map[string]string{"nkey": secret}, want: "not an nkey seed"},

		// A token in a URL's query string, as GitLab (private_token) and presigned S3 URLs
		// (X-Amz-Security-Token) carry them.
		{name: "git-query-token", kind: "KollectSnapshotSink", family: "snapshot", inline: true,
			spec: gitSpec(gitURL+"?private_token="+secret, "git-good")},
		{name: "s3-query-token", kind: "KollectSnapshotSink", family: "snapshot", inline: true,
			spec: s3Spec(s.s3.Endpoint+"/?X-Amz-Security-Token="+secret, "s3-good")},
		{name: "azure-query-sig", kind: "KollectSnapshotSink", family: "snapshot", inline: true,
			spec: fmt.Sprintf(`{type: azureblob, azureBlob: {account: kollectsec, container: %s, endpoint: "http://%s/kollectsec?sv=2021-08-06&sig=%s", secretRef: {name: azure-sas}}}`,
				bucket, closed, secret)},

		// The secret inline in URLs, each also with a good Secret: refused before any use.
		{name: "git-inline", kind: "KollectSnapshotSink", family: "snapshot", inline: true,
			spec: gitSpec("http://"+gitUser+":"+secret+"@"+gitHost+"/inv.git", "git-good")},
		{name: "gitlab-inline", kind: "KollectSnapshotSink", family: "snapshot", inline: true,
			spec: fmt.Sprintf(`{type: gitlab, gitlab: {url: %q, baseURL: %q, project: team/inv, mode: push, secretRef: {name: gitlab-token}}}`,
				gitURL, "http://"+gitUser+":"+secret+"@"+gitHost)},
		{name: "s3-inline", kind: "KollectSnapshotSink", family: "snapshot", inline: true,
			spec: s3Spec("http://"+s3Access+":"+secret+"@"+s3Host, "s3-good")},
		{name: "pg-inline", kind: "KollectDatabaseSink", family: "database", inline: true, spec: pgSpec(pgRole+":"+secret+"@127.0.0.1", "pg-good")},
		{name: "mongo-inline", kind: "KollectDatabaseSink", family: "database", inline: true,
			spec: mongoSpec("mongodb://kollect:"+secret+"@"+strings.TrimPrefix(s.mongo.URI, "mongodb://"), "mongo-secret")},
		{name: "kafka-inline", kind: "KollectEventSink", family: "event", inline: true, spec: kafkaSpec(kafkaUser+":"+secret+"@"+s.kafka.Addr, "kafka-good")},
		{name: "nats-inline", kind: "KollectEventSink", family: "event", inline: true, spec: natsSpec("nats://"+secret+"@"+natsHost, "nats-token-good")},
	}
}

// manifest is the sink object's YAML; bypass labels it so that the webhook skips it.
func (c sinkCase) manifest(ns string, bypass bool) string {
	labels := "{}"
	if bypass {
		labels = "{" + bypassLabel + ": \"true\"}"
	}
	return fmt.Sprintf("apiVersion: kollect.dev/v1alpha1\nkind: %s\nmetadata: {name: %s, namespace: %s, labels: %s}\nspec: %s\n",
		c.kind, c.name, ns, labels, c.spec)
}
