package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"kollect.dev/testenv"
)

// The credentials of the probe test. Each is a string found nowhere else, so that finding it
// in a status or a log line can only be a leak.
const (
	probeGitUser     = "kollect"
	probeGitPass     = "git-pass-7QmVx2"
	probeGitLabToken = "glpat-probe-9xKw4"
	probePGRole      = "kollect_probe"
	probePGPass      = "pg-pass-Zr41Lq"
	probeMongoPass   = "mongo-pass-Bn27Fe"
	probeKafkaUser   = "kollect"
	probeKafkaPass   = "kafka-pass-Lm02Vd"
	probeKafkaReader = "reader"
	probeReaderPass  = "kafka-reader-pass-Tt55Cs"
	probeNATSUser    = "kollect"
	probeNATSPass    = "nats-pass-Hq83Mw"
	// probeWrong is every wrong password, token and secret key.
	probeWrong = "wrong-secret-Xy19Pk"

	// probeGitLabProject is the one project the fake GitLab API knows.
	probeGitLabProject = "infra/fleet"
	// probeWritableTopic may be written by probeKafkaReader, probeReadOnlyTopic only read.
	probeWritableTopic = "kollect.rows"
	probeReadOnlyTopic = "audit.rows"
	probeBucket        = "probe"
)

// probeServers are the real servers (and the one fake, GitLab's API) of the probe test.
type probeServers struct {
	pg        *testenv.Postgres
	git       *testenv.GitHTTP // basic auth probeGitUser/probeGitPass
	gitlabGit *testenv.GitHTTP // basic auth oauth2/probeGitLabToken, as GitLab takes a token
	gitlabAPI *httptest.Server
	s3        *testenv.S3
	gcs       *testenv.GCS
	azure     *testenv.Azurite
	mongo     *testenv.Mongo
	bq        *testenv.BigQuery
	kafka     *testenv.Kafka
	nats      *testenv.NATS
	// fileRepo is a bare repository for file:// URLs.
	fileRepo string
}

// startProbeServers starts every server at once, then prepares what the good sink configs
// need: a role that must give its password, repositories, buckets and topics.
func startProbeServers(t *testing.T) *probeServers {
	t.Helper()
	s := &probeServers{}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	start := func(name string, fn func() (interface{ Stop() }, error)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := fn()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
				return
			}
			t.Cleanup(p.Stop)
		}()
	}
	start("postgres", func() (interface{ Stop() }, error) {
		var err error
		s.pg, err = testenv.StartPostgres()
		return s.pg, err
	})
	start("git", func() (interface{ Stop() }, error) {
		var err error
		s.git, err = testenv.StartGitHTTP(probeGitUser, probeGitPass)
		return s.git, err
	})
	start("gitlab git", func() (interface{ Stop() }, error) {
		var err error
		s.gitlabGit, err = testenv.StartGitHTTP("oauth2", probeGitLabToken)
		return s.gitlabGit, err
	})
	start("s3", func() (interface{ Stop() }, error) { var err error; s.s3, err = testenv.StartS3(); return s.s3, err })
	start("gcs", func() (interface{ Stop() }, error) { var err error; s.gcs, err = testenv.StartGCS(); return s.gcs, err })
	start("azurite", func() (interface{ Stop() }, error) {
		var err error
		s.azure, err = testenv.StartAzurite()
		return s.azure, err
	})
	start("mongo", func() (interface{ Stop() }, error) {
		var err error
		s.mongo, err = testenv.StartMongo()
		return s.mongo, err
	})
	start("bigquery", func() (interface{ Stop() }, error) {
		var err error
		s.bq, err = testenv.StartBigQuery("test")
		return s.bq, err
	})
	start("kafka", func() (interface{ Stop() }, error) {
		var err error
		s.kafka, err = testenv.StartKafkaWithACLs(testenv.KafkaACLOptions{User: probeKafkaUser, Password: probeKafkaPass,
			LimitedUser: probeKafkaReader, LimitedPassword: probeReaderPass, WritePrefix: "kollect."})
		return s.kafka, err
	})
	start("nats", func() (interface{ Stop() }, error) {
		var err error
		s.nats, err = testenv.StartNATS(testenv.NATSOptions{User: probeNATSUser, Password: probeNATSPass})
		return s.nats, err
	})
	wg.Wait()
	if len(errs) > 0 {
		t.Fatal(errors.Join(errs...))
	}
	s.gitlabAPI = httptest.NewServer(fakeGitLabProjectAPI(probeGitLabProject, probeGitLabToken))
	t.Cleanup(s.gitlabAPI.Close)

	ctx := context.Background()
	var err error
	if s.fileRepo, err = testenv.InitBareRepo(filepath.Join(t.TempDir(), "inv.git")); err != nil {
		t.Fatal(err)
	}
	for _, step := range []func() error{
		func() error { return s.pg.RequirePassword(ctx, probePGRole, probePGPass) },
		func() error { _, err := s.git.InitBareRepo("inv.git"); return err },
		func() error { _, err := s.gitlabGit.InitBareRepo("fleet.git"); return err },
		func() error { return createS3Bucket(ctx, s.s3, probeBucket) },
		func() error { return createGCSBucket(s.gcs, probeBucket) },
		func() error { return s.azure.CreateContainer(probeBucket) },
		func() error { return createKafkaTopics(ctx, s.kafka.Addr, probeWritableTopic, probeReadOnlyTopic) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func createS3Bucket(ctx context.Context, srv *testenv.S3, bucket string) error {
	client := s3.New(s3.Options{Region: srv.Region, BaseEndpoint: aws.String(srv.Endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(srv.AccessKey, srv.SecretKey, "")})
	if _, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		return fmt.Errorf("creating S3 bucket %s: %w", bucket, err)
	}
	return nil
}

// createGCSBucket creates a bucket through the emulator's JSON API (buckets.insert).
func createGCSBucket(srv *testenv.GCS, bucket string) error {
	body, _ := json.Marshal(map[string]string{"name": bucket})
	resp, err := http.Post(srv.Endpoint+"/storage/v1/b?project=test", "application/json", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("creating GCS bucket %s: %w", bucket, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("creating GCS bucket %s: %s", bucket, resp.Status)
	}
	return nil
}

// createKafkaTopics creates the topics as the superuser: the reader may create none.
func createKafkaTopics(ctx context.Context, addr string, topics ...string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr),
		kgo.SASL(scram.Auth{User: probeKafkaUser, Pass: probeKafkaPass}.AsSha256Mechanism()))
	if err != nil {
		return err
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopics(ctx, 1, -1, nil, topics...); err != nil {
		return fmt.Errorf("creating topics %v: %w", topics, err)
	}
	return nil
}

// fakeGitLabProjectAPI is a FAKE of the one GitLab REST call a gitlab sink in push mode probes
// (GET /api/v4/projects/:id), since no GitLab runs here; the git side of the sink is the real
// smart-HTTP server. It answers as GitLab does: 401 for another token, 404 for another
// project.
func fakeGitLabProjectAPI(project, token string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Header.Get("PRIVATE-TOKEN") != token:
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"message":"401 Unauthorized"}`))
		case r.Method == http.MethodGet && r.URL.EscapedPath() == "/api/v4/projects/"+url.PathEscape(project):
			_ = json.NewEncoder(w).Encode(map[string]any{"id": 1, "path_with_namespace": project})
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"message":"404 Project Not Found"}`))
		}
	})
}
