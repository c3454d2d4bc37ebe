package sinks

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"kollect.dev/testenv"
)

const (
	gitUser     = "oauth2"
	gitToken    = "glpat-e2e-token"
	gitlabProj  = "platform/fleet-inventory"
	s3Bucket    = "kollect-e2e"
	gcsBucket   = "kollect-e2e"
	azContainer = "kollect-e2e"
	bqProject   = "kollect-e2e"
	bqDataset   = "kollect"
	kafkaTopic  = "kollect.rows"
	natsStream  = "KOLLECT"
	natsBucket  = "kollect-rows"
	pgDatabase  = "inventory"
	mongoDBName = "inventory"
)

// snapshotSpec is the serialization and layout of every snapshot sink: NDJSON rows, one
// document per namespace, so that a change in one namespace must leave the others' documents
// untouched.
const snapshotSpec = `
  serialization: {format: ndjson}
  layout: {mode: byNamespace}`

// startSinks starts every server, prepares what a user would prepare (a database, buckets,
// bare repositories) and returns the sinks with their read-back clients.
func startSinks(t *testing.T, ctx context.Context) ([]*sinkUnderTest, error) {
	for _, tool := range []string{"git", "psql", "kcat", "s3cmd", "curl", "/usr/bin/python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("read-back client %s is missing (hack/ensure-servers.sh installs it): %w", tool, err)
		}
	}
	if out, err := exec.Command("/usr/bin/python3", "-c", "import pymongo").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("python3-pymongo is missing (hack/ensure-servers.sh installs it): %v: %s", err, out)
	}
	natsCLI, err := testenv.ServerBinary("nats")
	if err != nil {
		return nil, fmt.Errorf("the nats CLI (natscli) is missing: %w", err)
	}

	var (
		mu   sync.Mutex
		errs []string
		wg   sync.WaitGroup
	)
	var (
		pg    *testenv.Postgres
		gh    *testenv.GitHTTP
		s3    *testenv.S3
		gcs   *testenv.GCS
		azure *testenv.Azurite
		mongo *testenv.Mongo
		kafka *testenv.Kafka
		nats  *testenv.NATS
		bq    *testenv.BigQuery
	)
	starters := []func() (interface{ Stop() }, error){
		func() (interface{ Stop() }, error) { var err error; pg, err = testenv.StartPostgres(); return pg, err },
		func() (interface{ Stop() }, error) {
			var err error
			gh, err = testenv.StartGitHTTP(gitUser, gitToken)
			return gh, err
		},
		func() (interface{ Stop() }, error) { var err error; s3, err = testenv.StartS3(); return s3, err },
		func() (interface{ Stop() }, error) { var err error; gcs, err = testenv.StartGCS(); return gcs, err },
		func() (interface{ Stop() }, error) {
			var err error
			azure, err = testenv.StartAzurite()
			return azure, err
		},
		func() (interface{ Stop() }, error) {
			var err error
			mongo, err = testenv.StartMongo()
			return mongo, err
		},
		func() (interface{ Stop() }, error) {
			var err error
			kafka, err = testenv.StartKafka(testenv.KafkaOptions{})
			return kafka, err
		},
		func() (interface{ Stop() }, error) {
			var err error
			nats, err = testenv.StartNATS(testenv.NATSOptions{})
			return nats, err
		},
		func() (interface{ Stop() }, error) {
			var err error
			bq, err = testenv.StartBigQuery(bqProject)
			return bq, err
		},
	}
	for _, start := range starters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := start()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err.Error())
				return
			}
			t.Cleanup(p.Stop)
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, fmt.Errorf("starting the sink servers:\n%s", strings.Join(errs, "\n"))
	}

	// What a user prepares before pointing sinks at their stores.
	pgURL, err := pg.CreateDatabase(ctx, pgDatabase)
	if err != nil {
		return nil, err
	}
	fileRepo, err := testenv.InitBareRepo(filepath.Join(t.TempDir(), "inventory.git"))
	if err != nil {
		return nil, err
	}
	if _, err := gh.InitBareRepo("inventory.git"); err != nil {
		return nil, err
	}
	if _, err := gh.InitBareRepo("gitlab.git"); err != nil {
		return nil, err
	}
	s3c, err := newS3cmd(t.TempDir(), s3)
	if err != nil {
		return nil, err
	}
	if _, err := s3c.run(ctx, "mb", "s3://"+s3Bucket); err != nil {
		return nil, err
	}
	if err := createGCSBucket(ctx, gcs.Endpoint, gcsBucket); err != nil {
		return nil, err
	}
	if err := azure.CreateContainer(azContainer); err != nil {
		return nil, err
	}
	azReader := &azureReader{endpoint: azure.Endpoint, container: azContainer, sas: azure.AccountSAS("rl")}
	api := newFakeGitLabAPI(gitlabProj, gitToken)
	t.Cleanup(api.Close)

	httpAuth := strings.Replace(gh.URL, "http://", "http://"+gitUser+":"+gitToken+"@", 1)
	sinks := []*sinkUnderTest{
		{name: "git-file", typ: "git", client: "git CLI (bare repository)", manifest: fmt.Sprintf(`
apiVersion: kollect.dev/v1alpha1
kind: KollectSnapshotSink
metadata: {name: git-file, namespace: kollect-sinks}
spec:
  type: git
  git: {url: "file://%s"}`+snapshotSpec, fileRepo),
			rows: (&gitReader{dir: fileRepo, branch: "main"}).rows, marks: (&gitReader{dir: fileRepo, branch: "main"}).marks},
		{name: "git-http", typ: "git", client: "git CLI (fetch over smart HTTP)", manifest: fmt.Sprintf(`
apiVersion: v1
kind: Secret
metadata: {name: git-http, namespace: kollect-sinks}
stringData: {username: %s, password: %s}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectSnapshotSink
metadata: {name: git-http, namespace: kollect-sinks}
spec:
  type: git
  git: {url: "%s/inventory.git", secretRef: {name: git-http}}`+snapshotSpec, gitUser, gitToken, gh.URL)},
		{name: "gitlab", typ: "gitlab", client: "git CLI (fetch over smart HTTP) + fakeGitLabAPI write log", manifest: fmt.Sprintf(`
apiVersion: v1
kind: Secret
metadata: {name: gitlab-token, namespace: kollect-sinks}
stringData: {token: %s}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectSnapshotSink
metadata: {name: gitlab, namespace: kollect-sinks}
spec:
  type: gitlab
  gitlab: {url: "%s/gitlab.git", baseURL: "%s", project: %s, mode: mergeRequest, secretRef: {name: gitlab-token}}`+snapshotSpec,
			gitToken, gh.URL, api.URL, gitlabProj)},
		{name: "s3", typ: "s3", client: "s3cmd", manifest: fmt.Sprintf(`
apiVersion: v1
kind: Secret
metadata: {name: s3-keys, namespace: kollect-sinks}
stringData: {accessKeyID: %s, secretAccessKey: %s}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectSnapshotSink
metadata: {name: s3, namespace: kollect-sinks}
spec:
  type: s3
  s3: {bucket: %s, prefix: inv/, endpoint: "%s", usePathStyle: true, secretRef: {name: s3-keys}}`+snapshotSpec,
			s3.AccessKey, s3.SecretKey, s3Bucket, s3.Endpoint),
			rows: s3c.rows, marks: s3c.marks},
		{name: "gcs", typ: "gcs", client: "net/http + hand-written JSON (GCS JSON API)", manifest: fmt.Sprintf(`
apiVersion: kollect.dev/v1alpha1
kind: KollectSnapshotSink
metadata: {name: gcs, namespace: kollect-sinks}
spec:
  type: gcs
  gcs: {bucket: %s, prefix: inv/, endpoint: "%s"}`+snapshotSpec, gcsBucket, gcs.Endpoint),
			rows: (&gcsReader{endpoint: gcs.Endpoint, bucket: gcsBucket}).rows, marks: (&gcsReader{endpoint: gcs.Endpoint, bucket: gcsBucket}).marks},
		azureBlobSink(azure, azReader),
		postgresSink(pg, pgURL),
		{name: "mongodb", typ: "mongodb", client: "python3-pymongo", manifest: fmt.Sprintf(`
apiVersion: kollect.dev/v1alpha1
kind: KollectDatabaseSink
metadata: {name: mongodb, namespace: kollect-sinks}
spec:
  type: mongodb
  mongodb: {uri: "%s", database: %s}`, mongo.URI, mongoDBName),
			rows: (&mongoReader{uri: mongo.URI}).rows, marks: (&mongoReader{uri: mongo.URI}).marks},
		{name: "bigquery", typ: "bigquery", client: "net/http + hand-written JSON (BigQuery REST API)", manifest: fmt.Sprintf(`
apiVersion: kollect.dev/v1alpha1
kind: KollectDatabaseSink
metadata: {name: bigquery, namespace: kollect-sinks}
spec:
  type: bigquery
  bigquery: {project: %s, dataset: %s, endpoint: "%s"}`, bqProject, bqDataset, bq.Endpoint),
			rows: (&bqReader{endpoint: bq.Endpoint}).rows, marks: (&bqReader{endpoint: bq.Endpoint}).marks},
		kafkaSink(kafka),
		natsSink(nats, natsCLI),
	}
	httpRepo := &gitReader{dir: filepath.Join(t.TempDir(), "git-http-read.git"), remote: httpAuth + "/inventory.git", branch: "main"}
	sinks[1].rows, sinks[1].marks = httpRepo.rows, httpRepo.marks
	glRepo := &gitReader{dir: filepath.Join(t.TempDir(), "gitlab-read.git"), remote: httpAuth + "/gitlab.git",
		branch: "kollect/" + cluster + "/" + inventory, api: api}
	sinks[2].rows, sinks[2].marks = glRepo.rows, glRepo.marks
	return sinks, nil
}

// azureBlobSink is the azureblob sink into container azContainer of the emulator, writing
// with an account SAS from its Secret, read back by r (curl).
func azureBlobSink(az *testenv.Azurite, r *azureReader) *sinkUnderTest {
	return &sinkUnderTest{name: "azureblob", typ: "azureblob", client: "curl (Blob REST API, shared access signature)", manifest: fmt.Sprintf(`
apiVersion: v1
kind: Secret
metadata: {name: azure-sas, namespace: kollect-sinks}
stringData: {sasToken: "%s"}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectSnapshotSink
metadata: {name: azureblob, namespace: kollect-sinks}
spec:
  type: azureblob
  azureBlob: {account: %s, container: %s, prefix: inv/, endpoint: "%s", secretRef: {name: azure-sas}}`+snapshotSpec,
		az.AccountSAS("racwdl"), az.Account, azContainer, az.Endpoint),
		rows: r.rows, marks: r.marks}
}

// postgresSink is the postgres sink into database pgDatabase of pg (at pgURL), read back with
// psql. The sink suites share it with the outage test. The server serves no TLS: the manifest
// grants sslMode disable to the sink's namespace.
func postgresSink(pg *testenv.Postgres, pgURL string) *sinkUnderTest {
	return &sinkUnderTest{name: "postgres", typ: "postgres", client: "psql", manifest: unverifiedGrant(sinkNS) + fmt.Sprintf(`
---
apiVersion: v1
kind: Secret
metadata: {name: pg, namespace: kollect-sinks}
stringData: {username: postgres, password: unused-trust-auth}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectDatabaseSink
metadata: {name: postgres, namespace: kollect-sinks}
spec:
  type: postgres
  postgres: {host: 127.0.0.1, port: %d, database: %s, sslMode: disable, secretRef: {name: pg}}`, pg.Port, pgDatabase),
		rows: (&pgReader{url: pgURL}).rows, marks: (&pgReader{url: pgURL}).marks}
}

// kafkaSink is the kafka sink into topic kafkaTopic of k, read back with kcat.
func kafkaSink(k *testenv.Kafka) *sinkUnderTest {
	return &sinkUnderTest{name: "kafka", typ: "kafka", client: "kcat", manifest: fmt.Sprintf(`
apiVersion: kollect.dev/v1alpha1
kind: KollectEventSink
metadata: {name: kafka, namespace: kollect-sinks}
spec:
  type: kafka
  kafka: {brokers: ["%s"], topic: %s, createTopic: true, partitions: 3}`, k.Addr, kafkaTopic),
		rows: (&kafkaReader{addr: k.Addr}).rows, marks: (&kafkaReader{addr: k.Addr}).marks}
}

// natsSink is the nats sink into stream natsStream and bucket natsBucket of n, read back with
// the nats CLI at cli.
func natsSink(n *testenv.NATS, cli string) *sinkUnderTest {
	nc := &natsReader{cli: cli, url: n.URL, cache: map[string]map[uint64]natsMsg{}}
	return &sinkUnderTest{name: "nats", typ: "nats", client: "nats CLI (stream and KV bucket)", manifest: fmt.Sprintf(`
apiVersion: kollect.dev/v1alpha1
kind: KollectEventSink
metadata: {name: nats, namespace: kollect-sinks}
spec:
  type: nats
  nats: {servers: ["%s"], stream: %s, createStream: true, kvBucket: %s}`, n.URL, natsStream, natsBucket),
		rows: nc.rows, marks: nc.marks}
}

// fakeGitLabAPI is a FAKE of GitLab's REST API (the projects and merge_requests endpoints the
// gitlab sink calls), since no GitLab can run here; the git side of the gitlab sink is the
// real git smart-HTTP server. It counts the API writes (merge requests opened or updated).
type fakeGitLabAPI struct {
	*httptest.Server
	project, token string
	mu             sync.Mutex
	mrs            []map[string]any
	writes         int
}

func newFakeGitLabAPI(project, token string) *fakeGitLabAPI {
	f := &fakeGitLabAPI{project: project, token: token}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	return f
}

func (f *fakeGitLabAPI) writeCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writes
}

func (f *fakeGitLabAPI) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	answer := func(status int, body string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}
	if r.Header.Get("PRIVATE-TOKEN") != f.token {
		answer(http.StatusUnauthorized, `{"message":"401 Unauthorized"}`)
		return
	}
	prefix := "/api/v4/projects/" + strings.ReplaceAll(f.project, "/", "%2F")
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), prefix)
	if !ok {
		answer(http.StatusNotFound, `{"message":"404 Project Not Found"}`)
		return
	}
	switch {
	case rest == "" && r.Method == http.MethodGet:
		answer(http.StatusOK, fmt.Sprintf(`{"id":42,"path_with_namespace":%q}`, f.project))
	case rest == "/merge_requests" && r.Method == http.MethodGet:
		q := r.URL.Query()
		var out []string
		for _, mr := range f.mrs {
			if (q.Get("state") == "" || q.Get("state") == mr["state"]) && (q.Get("source_branch") == "" || q.Get("source_branch") == mr["source_branch"]) &&
				(q.Get("target_branch") == "" || q.Get("target_branch") == mr["target_branch"]) {
				out = append(out, mrJSON(mr))
			}
		}
		answer(http.StatusOK, "["+strings.Join(out, ",")+"]")
	case rest == "/merge_requests" && r.Method == http.MethodPost:
		in, err := decodeJSONObject(r)
		if err != nil || in["source_branch"] == nil || in["target_branch"] == nil || in["title"] == nil {
			answer(http.StatusBadRequest, `{"message":"400 Bad request"}`)
			return
		}
		f.writes++
		in["iid"], in["state"] = len(f.mrs)+1, "opened"
		in["web_url"] = fmt.Sprintf("%s/%s/-/merge_requests/%d", f.URL, f.project, len(f.mrs)+1)
		f.mrs = append(f.mrs, in)
		answer(http.StatusCreated, mrJSON(in))
	case strings.HasPrefix(rest, "/merge_requests/") && r.Method == http.MethodPut:
		var iid int
		_, _ = fmt.Sscan(strings.TrimPrefix(rest, "/merge_requests/"), &iid)
		if iid < 1 || iid > len(f.mrs) {
			answer(http.StatusNotFound, `{"message":"404 Not found"}`)
			return
		}
		in, _ := decodeJSONObject(r)
		mr := f.mrs[iid-1]
		for _, k := range []string{"title", "description"} {
			if v, ok := in[k]; ok {
				mr[k] = v
			}
		}
		f.writes++
		answer(http.StatusOK, mrJSON(mr))
	default:
		answer(http.StatusNotFound, `{"message":"404 Not Found"}`)
	}
}

// tempFile writes content to a new file in dir.
func tempFile(dir, name, content string) (string, error) {
	p := filepath.Join(dir, name)
	return p, os.WriteFile(p, []byte(content), 0o600)
}
