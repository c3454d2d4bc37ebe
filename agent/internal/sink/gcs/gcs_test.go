package gcs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/snapshot"
	v1alpha1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

var server *testenv.GCS

func TestMain(m *testing.M) {
	var err error
	server, err = testenv.StartGCS()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	server.Stop()
	os.Exit(code)
}

// The tests read the emulator through plain JSON API requests, independently of the client
// library the sink uses.
func api(t testing.TB, method, path string, body io.Reader) []byte {
	t.Helper()
	req, err := http.NewRequest(method, server.Endpoint+path, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %s %s", method, path, resp.Status, raw)
	}
	return raw
}

func newBucket(t testing.TB) string {
	name := fmt.Sprintf("b-%d", time.Now().UnixNano())
	api(t, "POST", "/storage/v1/b?project=test", strings.NewReader(`{"name":"`+name+`"}`))
	return name
}

func names(t testing.TB, bucket string) []string {
	var out struct {
		Items []struct{ Name string } `json:"items"`
	}
	if err := json.Unmarshal(api(t, "GET", "/storage/v1/b/"+bucket+"/o", nil), &out); err != nil {
		t.Fatal(err)
	}
	var ns []string
	for _, it := range out.Items {
		ns = append(ns, it.Name)
	}
	sort.Strings(ns)
	return ns
}

func download(t testing.TB, bucket, name string) []byte {
	return api(t, "GET", "/download/storage/v1/b/"+bucket+"/o/"+url.PathEscape(name)+"?alt=media", nil)
}

func newSink(t testing.TB, cluster, bucket, endpoint string, ser v1alpha1.Serialization, mode v1alpha1.LayoutMode) *Sink {
	t.Helper()
	spec := &v1alpha1.KollectSnapshotSinkSpec{Type: v1alpha1.SnapshotSinkGCS,
		GCS:           &v1alpha1.GCSSinkConfig{Bucket: bucket, Prefix: "inv", Endpoint: endpoint},
		Serialization: ser, Layout: v1alpha1.Layout{Mode: mode}}
	s, err := open(context.Background(), spec, sink.Env{Cluster: cluster, Namespace: "kollect", Name: "gcs", Log: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func row(t testing.TB, cluster, ns, name string, replicas int) export.Row {
	raw, err := export.EncodeAttributes(map[string]any{"replicas": replicas})
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
	resync bool // every batch is a periodic resync
	// coverage goes into every envelope: changing it alone makes a coverage-only batch.
	coverage []export.Coverage
}

func (e *exporter) export(t testing.TB, rows ...export.Row) Stats {
	t.Helper()
	snap := export.NewSnapshot(append([]export.Row(nil), rows...))
	e.gen++
	b := &sink.Batch{
		Envelope: export.Envelope{SchemaVersion: export.SchemaVersion, Cluster: e.sink.env.Cluster, Inventory: "workloads",
			Generation: e.gen, ExportedAt: time.Now(), ItemCount: snap.Len(), Checksum: snap.Checksum, Rows: snap.Rows,
			Writer: e.writer, Coverage: e.coverage},
		Diff:   export.Compute(e.prev, snap),
		Resync: e.resync,
	}
	if e.prev != nil {
		b.PreviousChecksum = e.prev.Checksum
	}
	if err := e.sink.Export(context.Background(), b); err != nil {
		t.Fatalf("export: %v", err)
	}
	e.prev = snap
	return e.sink.LastStats()
}

func verifyManifest(t testing.TB, bucket, cluster string) *snapshot.Manifest {
	t.Helper()
	m, err := snapshot.ParseManifest(download(t, bucket, "inv/"+cluster+"/workloads.manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range m.Files {
		sum := sha256.Sum256(download(t, bucket, "inv/"+f.Path))
		if hex.EncodeToString(sum[:]) != f.SHA256 {
			t.Errorf("%s: stored hash differs from the manifest", f.Path)
		}
	}
	return m
}

func TestObjectsManifestAndPrune(t *testing.T) {
	bucket := newBucket(t)
	api(t, "POST", "/upload/storage/v1/b/"+bucket+"/o?uploadType=media&name=inv/west/workloads/shop.ndjson.gz", strings.NewReader("x"))
	e := &exporter{sink: newSink(t, "east", bucket, server.Endpoint, v1alpha1.Serialization{Format: "ndjson", Compression: "gzip"}, v1alpha1.LayoutByNamespace)}
	rows := []export.Row{row(t, "east", "shop", "web", 1), row(t, "east", "shop", "api", 2), row(t, "east", "ops", "probe", 3)}
	if st := e.export(t, rows...); st.Written != 2 {
		t.Fatalf("%+v", st)
	}
	want := []string{"inv/east/workloads.manifest.json", "inv/east/workloads/ops.ndjson.gz", "inv/east/workloads/shop.ndjson.gz", "inv/west/workloads/shop.ndjson.gz"}
	if got := names(t, bucket); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("objects %v", got)
	}
	raw, err := snapshot.Decompress(v1alpha1.CompressionGzip, download(t, bucket, want[2]))
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(string(raw)), "\n"); len(lines) != 2 || lines[0] != string(e.prev.Rows[1].CanonicalJSON()) {
		t.Fatalf("shop document: %s", raw)
	}
	if m := verifyManifest(t, bucket, "east"); m.ItemCount != 3 || m.Checksum != e.prev.Checksum {
		t.Fatalf("manifest %+v", m)
	}
	if st := e.export(t, rows...); st.ManifestWritten || st.Written != 0 {
		t.Fatalf("unchanged export wrote %+v", st)
	}
	rows[0] = row(t, "east", "shop", "web", 7)
	if st := e.export(t, rows...); st.Written != 1 || st.Unchanged != 1 {
		t.Fatalf("changed row: %+v", st)
	}
	if st := e.export(t, rows[0], rows[1]); st.Deleted != 1 {
		t.Fatalf("deleted namespace: %+v", st)
	}
	if got := names(t, bucket); strings.Join(got, " ") != strings.Join([]string{want[0], want[2], want[3]}, " ") {
		t.Fatalf("after prune %v", got)
	}
	verifyManifest(t, bucket, "east")
}

func TestEmulatorHostFromEnvironment(t *testing.T) {
	t.Setenv("STORAGE_EMULATOR_HOST", server.Host)
	bucket := newBucket(t)
	s := newSink(t, "east", bucket, "", v1alpha1.Serialization{}, v1alpha1.LayoutDocument)
	if err := s.Probe(context.Background()); err != nil {
		t.Fatal(err)
	}
	(&exporter{sink: s}).export(t, row(t, "east", "a", "b", 1))
	if doc := download(t, bucket, "inv/east/workloads.yaml"); !bytes.Contains(doc, []byte("replicas: 1")) {
		t.Fatalf("document %s", doc)
	}
}

func TestManifestGenerationPrecondition(t *testing.T) {
	bucket := newBucket(t)
	s := newSink(t, "east", bucket, server.Endpoint, v1alpha1.Serialization{}, v1alpha1.LayoutDocument)
	(&exporter{sink: s}).export(t, row(t, "east", "a", "b", 1))
	key := "inv/east/workloads.manifest.json"
	_, gen, err := s.readManifest(context.Background(), key)
	if err != nil || gen == 0 {
		t.Fatalf("generation %d: %v", gen, err)
	}
	api(t, "POST", "/upload/storage/v1/b/"+bucket+"/o?uploadType=media&name="+url.QueryEscape(key), strings.NewReader(`{}`))
	err = s.putManifest(context.Background(), key, []byte(`{}`), gen)
	if err == nil || sink.ClassOf(err) != sink.Transient || !strings.Contains(err.Error(), errConflict.Error()) {
		t.Fatalf("stale generation: %v", err)
	}
	if err := s.putManifest(context.Background(), key, []byte(`{}`), 0); err == nil {
		t.Fatal("DoesNotExist on an existing manifest succeeded")
	}
}

func TestProbeAndPreview(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bucket := newBucket(t)
	if err := newSink(t, "east", bucket, server.Endpoint, v1alpha1.Serialization{}, "").Probe(ctx); err != nil {
		t.Fatal(err)
	}
	if err := newSink(t, "east", "missing-bucket", server.Endpoint, v1alpha1.Serialization{}, "").Probe(ctx); err == nil || sink.ClassOf(err) != sink.Terminal {
		t.Errorf("missing bucket: %v", err)
	}
	port, _ := testenv.FreePort()
	short, cancelShort := context.WithTimeout(ctx, 5*time.Second)
	defer cancelShort()
	if err := newSink(t, "east", bucket, fmt.Sprintf("http://127.0.0.1:%d", port), v1alpha1.Serialization{}, "").Probe(short); err == nil || sink.ClassOf(err) != sink.Transient {
		t.Errorf("unreachable: %v", err)
	}
	_, err := open(ctx, &v1alpha1.KollectSnapshotSinkSpec{GCS: &v1alpha1.GCSSinkConfig{Bucket: "b", SecretRef: &v1alpha1.SecretReference{Name: "k"}}},
		sink.Env{Secrets: func(context.Context, string) (map[string][]byte, error) { return map[string][]byte{}, nil }})
	if sink.ClassOf(err) != sink.Terminal {
		t.Errorf("secret without key.json: %v", err)
	}
	p, err := newSink(t, "east", bucket, server.Endpoint, v1alpha1.Serialization{Format: "parquet"}, v1alpha1.LayoutPerResource).Preview(ctx, "east", "workloads")
	if err != nil {
		t.Fatal(err)
	}
	if p.Destination != "gs://"+bucket+"/inv/ (endpoint "+server.Endpoint+")" ||
		strings.Join(p.Paths, " ") != "inv/east/workloads/<namespace>/<kind>/<name>.parquet inv/east/workloads.manifest.json" {
		t.Errorf("preview %+v", p)
	}
	if got := names(t, bucket); len(got) != 0 {
		t.Errorf("probe or preview wrote %v", got)
	}
}
