package s3

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/go-logr/logr"
	"github.com/parquet-go/parquet-go"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/snapshot"
	v1alpha1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

var server *testenv.S3

func TestMain(m *testing.M) {
	var err error
	server, err = testenv.StartS3()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	server.Stop()
	os.Exit(code)
}

// client is an S3 client of its own, the tests' independent view of the bucket.
func client() *s3.Client {
	return s3.New(s3.Options{Region: server.Region, BaseEndpoint: aws.String(server.Endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(server.AccessKey, server.SecretKey, "")})
}

func newBucket(t testing.TB) string {
	t.Helper()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 50 {
		name = name[:50]
	}
	name = fmt.Sprintf("%s-%d", name, time.Now().UnixNano()%100000)
	if _, err := client().CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: &name}); err != nil {
		t.Fatal(err)
	}
	return name
}

func newSink(t testing.TB, cluster, bucket string, ser v1alpha1.Serialization, mode v1alpha1.LayoutMode, secret map[string][]byte) *Sink {
	t.Helper()
	if secret == nil {
		secret = map[string][]byte{"accessKeyID": []byte(server.AccessKey), "secretAccessKey": []byte(server.SecretKey)}
	}
	spec := &v1alpha1.KollectSnapshotSinkSpec{Type: v1alpha1.SnapshotSinkS3,
		S3: &v1alpha1.S3SinkConfig{Bucket: bucket, Prefix: "fleet/", Endpoint: server.Endpoint, UsePathStyle: true,
			SecretRef: &v1alpha1.SecretReference{Name: "s3-keys"}},
		Serialization: ser, Layout: v1alpha1.Layout{Mode: mode}}
	env := sink.Env{Cluster: cluster, Namespace: "kollect", Name: "bucket", CacheDir: t.TempDir(), Log: logr.Discard(),
		Secrets: func(context.Context, string) (map[string][]byte, error) { return secret, nil }}
	s, err := open(context.Background(), spec, env)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func row(t testing.TB, cluster, ns, name string, replicas int) export.Row {
	raw, err := export.EncodeAttributes(map[string]any{"replicas": replicas, "image": "app:" + name, "ready": replicas > 0})
	if err != nil {
		t.Fatal(err)
	}
	return export.Row{Origin: &export.Origin{Cluster: cluster, Inventory: "workloads", Target: "deploys", Group: "apps", Version: "v1", Kind: "Deployment"}, Namespace: ns, Name: name, UID: "u-" + ns + "-" + name, Attributes: raw}
}

type exporter struct {
	sink   *Sink
	prev   *export.Snapshot
	gen    int64
	writer export.Writer
	// coverage goes into every envelope: changing it alone makes a coverage-only batch.
	coverage []export.Coverage
}

func (e *exporter) batch(rows ...export.Row) *sink.Batch {
	snap := export.NewSnapshot(append([]export.Row(nil), rows...))
	e.gen++
	b := &sink.Batch{
		Envelope: export.Envelope{SchemaVersion: export.SchemaVersion, Cluster: e.sink.env.Cluster, Inventory: "workloads",
			Generation: e.gen, ExportedAt: time.Now(), ItemCount: snap.Len(), Checksum: snap.Checksum, Rows: snap.Rows,
			Writer: e.writer, Coverage: e.coverage},
		Diff: export.Compute(e.prev, snap),
	}
	if e.prev != nil {
		b.PreviousChecksum = e.prev.Checksum
	}
	e.prev = snap
	return b
}

func (e *exporter) export(t testing.TB, rows ...export.Row) Stats {
	t.Helper()
	if err := e.sink.Export(context.Background(), e.batch(rows...)); err != nil {
		t.Fatalf("export: %v", err)
	}
	return e.sink.LastStats()
}

func get(t testing.TB, bucket, key string) []byte {
	t.Helper()
	out, err := client().GetObject(context.Background(), &s3.GetObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer out.Body.Close()
	raw, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func keys(t testing.TB, bucket string) []string {
	t.Helper()
	out, err := client().ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: &bucket})
	if err != nil {
		t.Fatal(err)
	}
	var ks []string
	for _, o := range out.Contents {
		ks = append(ks, *o.Key)
	}
	sort.Strings(ks)
	return ks
}

// verifyManifest checks, as a reader would, that every listed file is stored with its hash.
func verifyManifest(t testing.TB, bucket, cluster string) *snapshot.Manifest {
	t.Helper()
	m, err := snapshot.ParseManifest(get(t, bucket, "fleet/"+cluster+"/workloads.manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range m.Files {
		sum := sha256.Sum256(get(t, bucket, "fleet/"+f.Path))
		if hex.EncodeToString(sum[:]) != f.SHA256 {
			t.Errorf("%s: stored hash differs from the manifest: torn snapshot", f.Path)
		}
	}
	return m
}

func TestPerResourceWritesChangesAndPrunes(t *testing.T) {
	bucket := newBucket(t)
	// Another cluster's object in the same prefix must survive every prune.
	foreign := "fleet/west/workloads/shop/Deployment/web.json"
	if _, err := client().PutObject(context.Background(), &s3.PutObjectInput{Bucket: &bucket, Key: &foreign, Body: strings.NewReader("{}")}); err != nil {
		t.Fatal(err)
	}
	e := &exporter{sink: newSink(t, "east", bucket, v1alpha1.Serialization{Format: "json"}, v1alpha1.LayoutPerResource, nil)}
	rows := []export.Row{row(t, "east", "shop", "web", 3), row(t, "east", "shop", "api", 2), row(t, "east", "ops", "probe", 1)}
	if st := e.export(t, rows...); st.Written != 3 || !st.ManifestWritten {
		t.Fatalf("first export %+v", st)
	}
	want := []string{
		"fleet/east/workloads.manifest.json", "fleet/east/workloads/ops/Deployment/probe.json",
		"fleet/east/workloads/shop/Deployment/api.json", "fleet/east/workloads/shop/Deployment/web.json", foreign,
	}
	if got := keys(t, bucket); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("keys %v, want %v", got, want)
	}
	m := verifyManifest(t, bucket, "east")
	if m.ItemCount != 3 || m.Generation != 1 || len(m.Files) != 3 || m.Checksum != e.prev.Checksum {
		t.Fatalf("manifest %+v", m)
	}
	if doc := get(t, bucket, want[3]); !bytes.Contains(doc, []byte(`"replicas":3`)) {
		t.Errorf("web document: %s", doc)
	}

	if st := e.export(t, rows...); st.Written != 0 || st.ManifestWritten {
		t.Fatalf("unchanged export wrote %+v", st)
	}
	rows[0] = row(t, "east", "shop", "web", 5)
	if st := e.export(t, rows...); st.Written != 1 || st.Unchanged != 2 || st.Deleted != 0 {
		t.Fatalf("one changed row: %+v", st)
	}
	if doc := get(t, bucket, want[3]); !bytes.Contains(doc, []byte(`"replicas":5`)) {
		t.Errorf("web document not updated: %s", doc)
	}
	if st := e.export(t, rows[0], rows[1]); st.Written != 0 || st.Deleted != 1 {
		t.Fatalf("deleted row: %+v", st)
	}
	if got := keys(t, bucket); strings.Join(got, " ") != strings.Join([]string{want[0], want[2], want[3], foreign}, " ") {
		t.Fatalf("after prune: %v", got)
	}
	if m := verifyManifest(t, bucket, "east"); m.ItemCount != 2 || m.Generation != 4 {
		t.Fatalf("manifest after prune %+v", m)
	}

	// A restarted agent (no manifest knowledge, full diff) with a changed layout prunes the
	// old layout's documents through the old manifest.
	e2 := &exporter{sink: newSink(t, "east", bucket, v1alpha1.Serialization{Format: "json"}, v1alpha1.LayoutDocument, nil)}
	if st := e2.export(t, rows[0], rows[1]); st.Written != 1 || st.Deleted != 2 {
		t.Fatalf("layout change: %+v", st)
	}
	if got := keys(t, bucket); strings.Join(got, " ") != strings.Join([]string{"fleet/east/workloads.json", want[0], foreign}, " ") {
		t.Fatalf("after layout change: %v", got)
	}
}

func TestFirstExportPrunesLeftoversWithoutManifest(t *testing.T) {
	bucket := newBucket(t)
	stale := "fleet/east/workloads/gone.csv.gz"
	if _, err := client().PutObject(context.Background(), &s3.PutObjectInput{Bucket: &bucket, Key: &stale, Body: strings.NewReader("x")}); err != nil {
		t.Fatal(err)
	}
	e := &exporter{sink: newSink(t, "east", bucket, v1alpha1.Serialization{Format: "csv", Compression: "gzip"}, v1alpha1.LayoutByNamespace, nil)}
	rows := []export.Row{row(t, "east", "shop", "web", 3), row(t, "east", "shop", "api", 0), row(t, "east", "ops", "probe", 1)}
	if st := e.export(t, rows...); st.Written != 2 || st.Deleted != 1 {
		t.Fatalf("%+v", st)
	}
	verifyManifest(t, bucket, "east")
	// CSV read back with encoding/csv matches the rows of its namespace.
	raw, err := snapshot.Decompress(v1alpha1.CompressionGzip, get(t, bucket, "fleet/east/workloads/shop.csv.gz"))
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(bytes.NewReader(raw)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(recs[0], ",") != "cluster,inventory,target,group,version,kind,namespace,name,uid,profile,profileGeneration,image,ready,replicas" || len(recs) != 3 {
		t.Fatalf("csv %v", recs)
	}
	if strings.Join(recs[1], ",") != "east,workloads,deploys,apps,v1,Deployment,shop,api,u-shop-api,,0,app:api,false,0" ||
		strings.Join(recs[2], ",") != "east,workloads,deploys,apps,v1,Deployment,shop,web,u-shop-web,,0,app:web,true,3" {
		t.Fatalf("csv rows %v", recs[1:])
	}
}

func TestParquetWithEncryptionReadsBack(t *testing.T) {
	bucket := newBucket(t)
	s := newSink(t, "east", bucket, v1alpha1.Serialization{Format: "parquet", Compression: "zstd", PromotedAttributes: []string{"replicas"}}, v1alpha1.LayoutDocument, nil)
	s.cfg.ServerSideEncryption = "AES256"
	e := &exporter{sink: s}
	var rows []export.Row
	for i := range 500 {
		rows = append(rows, row(t, "east", "ns", fmt.Sprintf("d%03d", i), i))
	}
	e.export(t, rows...)
	data := get(t, bucket, "fleet/east/workloads.parquet")
	f, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if f.NumRows() != 500 {
		t.Fatalf("%d rows", f.NumRows())
	}
	col, ok := f.Schema().Lookup("replicas")
	if !ok {
		t.Fatal("no replicas column")
	}
	values := make([]parquet.Value, 500)
	pages := f.RowGroups()[0].ColumnChunks()[col.ColumnIndex].Pages()
	defer pages.Close()
	n := 0
	for n < 500 {
		page, err := pages.ReadPage()
		if err != nil {
			t.Fatal(err)
		}
		m, _ := page.Values().ReadValues(values[n:])
		n += m
	}
	for i, v := range values {
		if want := e.prev.Rows[i].Name; fmt.Sprintf("d%03d", v.Int64()) != want {
			t.Fatalf("row %d: replicas %d for %s", i, v.Int64(), want)
		}
	}
}

func TestManifestWriteIsConditional(t *testing.T) {
	bucket := newBucket(t)
	s := newSink(t, "east", bucket, v1alpha1.Serialization{}, v1alpha1.LayoutDocument, nil)
	e := &exporter{sink: s}
	e.export(t, row(t, "east", "a", "b", 1))
	key := "fleet/east/workloads.manifest.json"
	head, err := client().HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		t.Fatal(err)
	}
	// Another writer replaces the manifest after we read it: our write must be refused.
	if _, err := client().PutObject(context.Background(), &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: strings.NewReader(`{"checksum":"other"}`)}); err != nil {
		t.Fatal(err)
	}
	err = s.putManifest(context.Background(), key, []byte("{}"), aws.ToString(head.ETag))
	if err == nil || sink.ClassOf(err) != sink.Transient || !strings.Contains(err.Error(), errConflict.Error()) {
		t.Fatalf("stale If-Match: %v", err)
	}
	if err := s.putManifest(context.Background(), key, []byte("{}"), ""); err == nil {
		t.Fatal("If-None-Match on an existing manifest succeeded")
	}
	// The next export reads the current manifest and succeeds.
	e.export(t, row(t, "east", "a", "b", 2))
	verifyManifest(t, bucket, "east")
}

func TestProbeAndPreview(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bucket := newBucket(t)
	if err := newSink(t, "east", bucket, v1alpha1.Serialization{}, "", nil).Probe(ctx); err != nil {
		t.Fatalf("probe: %v", err)
	}
	// The messages name the cause, which the answer to HeadBucket alone does not.
	for name, tc := range map[string]struct {
		bucket string
		secret map[string][]byte
		class  sink.ErrorClass
		cause  string
	}{
		"missing bucket": {"no-such-bucket", nil, sink.Terminal, "NoSuchBucket"},
		"wrong secret": {bucket, map[string][]byte{"accessKeyID": []byte(server.AccessKey), "secretAccessKey": []byte("wrong-secret-key")},
			sink.Terminal, "SignatureDoesNotMatch"},
		// versitygw answers XAdminUserNotFound "No user exists with the provided access key
		// ID." where AWS answers InvalidAccessKeyId "The AWS Access Key Id you provided does
		// not exist in our records.".
		"unknown key": {bucket, map[string][]byte{"accessKeyID": []byte("nobody"), "secretAccessKey": []byte("x")}, sink.Terminal, "access key"},
	} {
		err := newSink(t, "east", tc.bucket, v1alpha1.Serialization{}, "", tc.secret).Probe(ctx)
		if err == nil || sink.ClassOf(err) != tc.class || !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(tc.cause)) {
			t.Errorf("%s: want %s naming %s, got %v", name, tc.class, tc.cause, err)
		} else if strings.Contains(err.Error(), "wrong-secret-key") {
			t.Errorf("%s: the error shows the secret key: %v", name, err)
		}
	}
	s := newSink(t, "east", bucket, v1alpha1.Serialization{}, "", nil)
	port, _ := testenv.FreePort()
	s.client = s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(fmt.Sprintf("http://127.0.0.1:%d", port)), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider("a", "b", "")})
	if err := s.Probe(ctx); err == nil || sink.ClassOf(err) != sink.Transient {
		t.Errorf("unreachable: %v", err)
	}
	if _, err := open(ctx, &v1alpha1.KollectSnapshotSinkSpec{S3: &v1alpha1.S3SinkConfig{Bucket: "b", SecretRef: &v1alpha1.SecretReference{Name: "x"}}},
		sink.Env{Secrets: func(context.Context, string) (map[string][]byte, error) { return map[string][]byte{}, nil }}); sink.ClassOf(err) != sink.Terminal {
		t.Errorf("secret without keys: %v", err)
	}

	p, err := newSink(t, "east", bucket, v1alpha1.Serialization{Format: "ndjson", Compression: "zstd"}, v1alpha1.LayoutByKind, nil).Preview(ctx, "east", "workloads")
	if err != nil {
		t.Fatal(err)
	}
	if p.Destination != "s3://"+bucket+"/fleet/ (region us-east-1, endpoint "+server.Endpoint+")" ||
		strings.Join(p.Paths, " ") != "fleet/east/workloads/<kind>.ndjson.zst fleet/east/workloads.manifest.json" {
		t.Errorf("preview %+v", p)
	}
	if ks := keys(t, bucket); len(ks) != 0 {
		t.Errorf("probe or preview wrote %v", ks)
	}
}
