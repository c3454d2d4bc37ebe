package agent

import (
	"encoding/base64"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// probeCases are the sink objects of TestSinkProbeOfEveryType by name; a case's Secret, when
// it has one, has the sink's name. closedPort is a port of 127.0.0.1 nothing listens on.
func probeCases(srv *probeServers, closedPort int) map[string]probeCase {
	closed := fmt.Sprintf("127.0.0.1:%d", closedPort)
	secretRef := func(name string) *kollectv1.SecretReference { return &kollectv1.SecretReference{Name: name} }
	snapshot := func(spec kollectv1.KollectSnapshotSinkSpec) *kollectv1.KollectSnapshotSink {
		return &kollectv1.KollectSnapshotSink{Spec: spec}
	}
	database := func(spec kollectv1.KollectDatabaseSinkSpec) *kollectv1.KollectDatabaseSink {
		return &kollectv1.KollectDatabaseSink{Spec: spec}
	}
	event := func(spec kollectv1.KollectEventSinkSpec) *kollectv1.KollectEventSink {
		spec.Mode, spec.BufferSize = kollectv1.EventModeChanges, 1000
		return &kollectv1.KollectEventSink{Spec: spec}
	}
	missingKey := func(secret, key string) []string { return []string{"secret " + secret, key} }

	git := func(url, secret string) *kollectv1.KollectSnapshotSink {
		cfg := &kollectv1.GitSinkConfig{URL: url, Branch: "main"}
		if secret != "" {
			cfg.SecretRef = secretRef(secret)
		}
		return snapshot(kollectv1.KollectSnapshotSinkSpec{Type: kollectv1.SnapshotSinkGit, Git: cfg})
	}
	gitBasic := func(pass string) map[string]string {
		return map[string]string{"username": probeGitUser, "password": pass}
	}

	gitlab := func(base, project, secret string) *kollectv1.KollectSnapshotSink {
		return snapshot(kollectv1.KollectSnapshotSinkSpec{Type: kollectv1.SnapshotSinkGitLab, GitLab: &kollectv1.GitLabSinkConfig{
			GitSinkConfig: kollectv1.GitSinkConfig{URL: srv.gitlabGit.URL + "/fleet.git", Branch: "main", SecretRef: secretRef(secret)},
			BaseURL:       base, Project: project, Mode: kollectv1.GitLabPush}})
	}
	gitlabToken := func(token string) map[string]string { return map[string]string{"token": token} }

	s3 := func(endpoint, bucket, secret string) *kollectv1.KollectSnapshotSink {
		return snapshot(kollectv1.KollectSnapshotSinkSpec{Type: kollectv1.SnapshotSinkS3, S3: &kollectv1.S3SinkConfig{
			Bucket: bucket, Region: srv.s3.Region, Endpoint: endpoint, UsePathStyle: true, SecretRef: secretRef(secret)}})
	}
	s3Keys := func(secretKey string) map[string]string {
		return map[string]string{"accessKeyID": srv.s3.AccessKey, "secretAccessKey": secretKey}
	}

	azure := func(endpoint, container, secret string) *kollectv1.KollectSnapshotSink {
		return snapshot(kollectv1.KollectSnapshotSinkSpec{Type: kollectv1.SnapshotSinkAzureBlob, AzureBlob: &kollectv1.AzureBlobSinkConfig{
			Account: srv.azure.Account, Container: container, Endpoint: endpoint, SecretRef: *secretRef(secret)}})
	}
	azureSAS := map[string]string{"sasToken": srv.azure.AccountSAS("racwdl")}

	gcs := func(endpoint, bucket, secret string) *kollectv1.KollectSnapshotSink {
		cfg := &kollectv1.GCSSinkConfig{Bucket: bucket, Endpoint: endpoint}
		if secret != "" {
			cfg.SecretRef = secretRef(secret)
		}
		return snapshot(kollectv1.KollectSnapshotSinkSpec{Type: kollectv1.SnapshotSinkGCS, GCS: cfg})
	}

	postgres := func(port int32, secret string) *kollectv1.KollectDatabaseSink {
		return database(kollectv1.KollectDatabaseSinkSpec{Type: kollectv1.DatabaseSinkPostgres, Postgres: &kollectv1.PostgresSinkConfig{
			Host: "127.0.0.1", Port: port, Database: "postgres", Schema: "kollect", Table: "rows", SSLMode: "disable",
			SecretRef: kollectv1.SecretReference{Name: secret}, StatementTimeout: metav1.Duration{Duration: 10 * time.Second}}})
	}
	pgLogin := func(pass string) map[string]string {
		return map[string]string{"username": probePGRole, "password": pass}
	}
	mongo := func(uri, secret string) *kollectv1.KollectDatabaseSink {
		cfg := &kollectv1.MongoDBSinkConfig{URI: uri, Database: "kollect", Collection: "rows"}
		if secret != "" {
			cfg.SecretRef = secretRef(secret)
		}
		return database(kollectv1.KollectDatabaseSinkSpec{Type: kollectv1.DatabaseSinkMongoDB, MongoDB: cfg})
	}

	bigquery := func(project, endpoint, secret string) *kollectv1.KollectDatabaseSink {
		cfg := &kollectv1.BigQuerySinkConfig{Project: project, Dataset: "kollect_probe", Endpoint: endpoint}
		if secret != "" {
			cfg.SecretRef = secretRef(secret)
		}
		return database(kollectv1.KollectDatabaseSinkSpec{Type: kollectv1.DatabaseSinkBigQuery, BigQuery: cfg})
	}

	kafka := func(broker, topic, secret string) *kollectv1.KollectEventSink {
		return event(kollectv1.KollectEventSinkSpec{Type: kollectv1.EventSinkKafka, Timeout: metav1.Duration{Duration: 5 * time.Second},
			Kafka: &kollectv1.KafkaSinkConfig{Brokers: []string{broker}, Topic: topic, SASLMechanism: "SCRAM-SHA-256",
				SecretRef: secretRef(secret)}})
	}
	kafkaLogin := func(user, pass string) map[string]string {
		return map[string]string{"username": user, "password": pass}
	}

	nats := func(url, secret string) *kollectv1.KollectEventSink {
		return event(kollectv1.KollectEventSinkSpec{Type: kollectv1.EventSinkNATS, Timeout: metav1.Duration{Duration: 5 * time.Second},
			NATS: &kollectv1.NATSSinkConfig{Servers: []string{url}, Stream: "KOLLECTPROBE", CreateStream: true, SecretRef: secretRef(secret)}})
	}
	natsLogin := func(pass string) map[string]string { return map[string]string{"user": probeNATSUser, "password": pass} }

	refused := []string{"connection refused", closed}
	return map[string]probeCase{
		// git over file://: no server, so neither an endpoint nor credentials to refuse.
		"git-file-good":    {obj: git("file://"+srv.fileRepo, ""), ready: true},
		"git-file-missing": {obj: git("file://"+srv.fileRepo+"-missing", ""), want: []string{"repository not found"}},

		// git over smart HTTP with basic auth.
		"git-http-good":        {obj: git(srv.git.URL+"/inv.git", "git-http-good"), secret: gitBasic(probeGitPass), ready: true},
		"git-http-unreachable": {obj: git("http://"+closed+"/inv.git", "git-http-unreachable"), secret: gitBasic(probeGitPass), want: refused},
		"git-http-wrong":       {obj: git(srv.git.URL+"/inv.git", "git-http-wrong"), secret: gitBasic(probeWrong), want: []string{"credentials refused"}},
		"git-http-nokey": {obj: git(srv.git.URL+"/inv.git", "git-http-nokey"), secret: map[string]string{"user": probeGitUser},
			want: missingKey("git-http-nokey", "token, username/password")},

		// gitlab: the real git server (a token is the basic-auth password of user oauth2) and
		// the fake project API.
		"gitlab-good": {obj: gitlab(srv.gitlabAPI.URL, probeGitLabProject, "gitlab-good"), secret: gitlabToken(probeGitLabToken), ready: true},
		"gitlab-api-unreachable": {obj: gitlab("http://"+closed, probeGitLabProject, "gitlab-api-unreachable"),
			secret: gitlabToken(probeGitLabToken), want: refused},
		"gitlab-wrong": {obj: gitlab(srv.gitlabAPI.URL, probeGitLabProject, "gitlab-wrong"), secret: gitlabToken(probeWrong),
			want: []string{"credentials refused"}},
		"gitlab-missing-project": {obj: gitlab(srv.gitlabAPI.URL, "infra/nope", "gitlab-missing-project"),
			secret: gitlabToken(probeGitLabToken), want: []string{"404 Project Not Found"}},
		"gitlab-nokey": {obj: gitlab(srv.gitlabAPI.URL, probeGitLabProject, "gitlab-nokey"),
			secret: map[string]string{"private-token": probeGitLabToken}, want: missingKey("gitlab-nokey", "token")},

		// s3 (versitygw checks the signature of every request).
		"s3-good":        {obj: s3(srv.s3.Endpoint, probeBucket, "s3-good"), secret: s3Keys(srv.s3.SecretKey), ready: true},
		"s3-unreachable": {obj: s3("http://"+closed, probeBucket, "s3-unreachable"), secret: s3Keys(srv.s3.SecretKey), want: refused},
		"s3-wrong": {obj: s3(srv.s3.Endpoint, probeBucket, "s3-wrong"), secret: s3Keys(probeWrong),
			want: []string{"bucket " + probeBucket, "SignatureDoesNotMatch"}},
		"s3-missing-bucket": {obj: s3(srv.s3.Endpoint, "nope", "s3-missing-bucket"), secret: s3Keys(srv.s3.SecretKey),
			want: []string{"bucket nope", "NoSuchBucket"}},
		"s3-nokey": {obj: s3(srv.s3.Endpoint, probeBucket, "s3-nokey"), secret: map[string]string{"accessKeyID": srv.s3.AccessKey},
			want: missingKey("s3-nokey", "secretAccessKey")},

		// gcs: fake-gcs-server authenticates nobody, so a missing bucket stands in for refused
		// credentials; a Secret without key.json fails before any request.
		"gcs-good":           {obj: gcs(srv.gcs.Endpoint, probeBucket, ""), ready: true},
		"gcs-unreachable":    {obj: gcs("http://"+closed, probeBucket, ""), want: refused},
		"gcs-missing-bucket": {obj: gcs(srv.gcs.Endpoint, "nope", ""), want: []string{"bucket nope", "doesn't exist"}},
		"gcs-nokey": {obj: gcs(srv.gcs.Endpoint, probeBucket, "gcs-nokey"), secret: map[string]string{"key": "{}"},
			want: missingKey("gcs-nokey", "key.json")},

		// azureblob: Azurite checks every request's shared access signature or shared key.
		"azure-good":     {obj: azure(srv.azure.Endpoint, probeBucket, "azure-good"), secret: azureSAS, ready: true},
		"azure-key-good": {obj: azure(srv.azure.Endpoint, probeBucket, "azure-key-good"), secret: map[string]string{"accountKey": srv.azure.Key}, ready: true},
		"azure-unreachable": {obj: azure("http://"+closed+"/"+srv.azure.Account, probeBucket, "azure-unreachable"), secret: azureSAS,
			want: refused},
		"azure-wrong": {obj: azure(srv.azure.Endpoint, probeBucket, "azure-wrong"),
			secret: map[string]string{"accountKey": base64.StdEncoding.EncodeToString([]byte(probeWrong))},
			want:   []string{"AuthorizationFailure (HTTP 403)", "check the Secret's sasToken or accountKey"}},
		"azure-missing-container": {obj: azure(srv.azure.Endpoint, "nope", "azure-missing-container"), secret: azureSAS,
			want: []string{"/nope/", "ContainerNotFound", "the container does not exist"}},
		"azure-nokey": {obj: azure(srv.azure.Endpoint, probeBucket, "azure-nokey"), secret: map[string]string{"sas": "x"},
			want: []string{"secret azure-nokey needs sasToken (a shared access signature) or accountKey"}},

		// postgres: the role must give its scram-sha-256 password (see RequirePassword).
		"pg-good":        {obj: postgres(int32(srv.pg.Port), "pg-good"), secret: pgLogin(probePGPass), ready: true},
		"pg-unreachable": {obj: postgres(int32(closedPort), "pg-unreachable"), secret: pgLogin(probePGPass), want: refused},
		"pg-wrong": {obj: postgres(int32(srv.pg.Port), "pg-wrong"), secret: pgLogin(probeWrong),
			want: []string{"password authentication failed", probePGRole}},
		"pg-nokey": {obj: postgres(int32(srv.pg.Port), "pg-nokey"), secret: map[string]string{"user": probePGRole, "password": probePGPass},
			want: []string{"Secret pg-nokey has no key username"}},

		// mongodb: FerretDB on SQLite checks no password (PLAIN with any password passes) and
		// refuses the SCRAM the driver uses by default, so any credentials are refused: the case
		// proves a refusal is reported with its cause and without the password, not that a
		// wrong password is told from a right one. A missing database is no failure in MongoDB
		// (the first write creates it).
		"mongo-good":        {obj: mongo(srv.mongo.URI, ""), ready: true},
		"mongo-unreachable": {obj: mongo("mongodb://"+closed+"/", ""), want: refused},
		"mongo-refused": {obj: mongo(srv.mongo.URI, "mongo-refused"), secret: map[string]string{"username": "kollect", "password": probeMongoPass},
			want: []string{"AuthenticationFailed"}},
		"mongo-nokey": {obj: mongo(srv.mongo.URI, "mongo-nokey"), secret: map[string]string{"password": probeMongoPass},
			want: []string{"Secret mongo-nokey has no key username"}},

		// bigquery: the emulator authenticates nobody, so a missing project stands in for
		// refused credentials (a missing dataset is fine: the first export creates it).
		"bq-good":            {obj: bigquery(srv.bq.Project, srv.bq.Endpoint, ""), ready: true},
		"bq-unreachable":     {obj: bigquery(srv.bq.Project, "http://"+closed, ""), want: refused},
		"bq-missing-project": {obj: bigquery("nope", srv.bq.Endpoint, ""), want: []string{"project nope", "not found"}},
		"bq-nokey": {obj: bigquery(srv.bq.Project, srv.bq.Endpoint, "bq-nokey"), secret: map[string]string{"key": "{}"},
			want: []string{"Secret bq-nokey has no key key.json"}},

		// kafka: SASL SCRAM-SHA-256 and ACLs (kfake, see StartKafkaWithACLs).
		"kafka-good": {obj: kafka(srv.kafka.Addr, probeWritableTopic, "kafka-good"), secret: kafkaLogin(probeKafkaUser, probeKafkaPass), ready: true},
		"kafka-reader-good": {obj: kafka(srv.kafka.Addr, probeWritableTopic, "kafka-reader-good"),
			secret: kafkaLogin(probeKafkaReader, probeReaderPass), ready: true},
		"kafka-unreachable": {obj: kafka(closed, probeWritableTopic, "kafka-unreachable"), secret: kafkaLogin(probeKafkaUser, probeKafkaPass),
			want: refused},
		"kafka-wrong": {obj: kafka(srv.kafka.Addr, probeWritableTopic, "kafka-wrong"), secret: kafkaLogin(probeKafkaUser, probeWrong),
			want: []string{"refused the SASL SCRAM-SHA-256 credentials of Secret kafka-wrong"}},
		"kafka-readonly-topic": {obj: kafka(srv.kafka.Addr, probeReadOnlyTopic, "kafka-readonly-topic"),
			secret: kafkaLogin(probeKafkaReader, probeReaderPass), want: []string{"topic " + probeReadOnlyTopic, "may not write"}},
		"kafka-nokey": {obj: kafka(srv.kafka.Addr, probeWritableTopic, "kafka-nokey"), secret: map[string]string{"user": probeKafkaUser},
			want: missingKey("kafka-nokey", "username")},

		// nats: user and password.
		"nats-good":        {obj: nats(srv.nats.URL, "nats-good"), secret: natsLogin(probeNATSPass), ready: true},
		"nats-unreachable": {obj: nats("nats://"+closed, "nats-unreachable"), secret: natsLogin(probeNATSPass), want: refused},
		"nats-wrong":       {obj: nats(srv.nats.URL, "nats-wrong"), secret: natsLogin(probeWrong), want: []string{"authorization violation"}},
		"nats-nokey": {obj: nats(srv.nats.URL, "nats-nokey"), secret: map[string]string{"username": probeNATSUser, "password": probeNATSPass},
			want: missingKey("nats-nokey", "user")},
	}
}
