package azureblob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
	"kollect.dev/agent/internal/sink/snapshot"
	v1alpha1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// server is Azurite, the Azure Storage emulator (a stand-in for Azure Blob Storage), with its
// development account.
var server *testenv.Azurite

func TestMain(m *testing.M) {
	var err error
	server, err = testenv.StartAzurite()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	server.Stop()
	os.Exit(code)
}

var containers atomic.Int64

// newContainer creates an empty container through the Blob REST API.
func newContainer(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("c%d-%d", time.Now().UnixNano()%1_000_000_000, containers.Add(1))
	if err := server.CreateContainer(name); err != nil {
		t.Fatal(err)
	}
	return name
}

// The tests read the emulator through plain Blob REST API requests authorized by an account
// shared access signature, independently of the SDK the sink uses.
func rest(t testing.TB, method, path string) ([]byte, http.Header) {
	t.Helper()
	st, body, header, err := server.Do(method, path, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st/100 != 2 {
		t.Fatalf("%s %s: %d %s", method, path, st, body)
	}
	return body, header
}

// etags maps every blob of the container to its ETag, as the emulator lists them.
func etags(t testing.TB, cont string) map[string]string {
	t.Helper()
	raw, _ := rest(t, "GET", "/"+cont+"?restype=container&comp=list")
	var out struct {
		Blobs []struct {
			Name       string `xml:"Name"`
			Properties struct {
				ETag string `xml:"Etag"`
			} `xml:"Properties"`
		} `xml:"Blobs>Blob"`
	}
	if err := xml.Unmarshal(raw, &out); err != nil {
		t.Fatalf("listing %s: %v\n%s", cont, err, raw)
	}
	m := map[string]string{}
	for _, b := range out.Blobs {
		m[b.Name] = b.Properties.ETag
	}
	return m
}

func names(t testing.TB, cont string) []string {
	var ns []string
	for n := range etags(t, cont) {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}

func download(t testing.TB, cont, name string) []byte {
	body, _ := rest(t, "GET", "/"+cont+"/"+name)
	return body
}

// secrets answers the sink's secretRef: a shared access signature minted for the emulator's
// account, or its key (mode "key").
func secrets(mode string) sink.SecretGetter {
	return func(context.Context, string) (map[string][]byte, error) {
		if mode == "key" {
			return map[string][]byte{KeyAccountKey: []byte(server.Key)}, nil
		}
		return map[string][]byte{KeySASToken: []byte("?" + server.AccountSAS("racwdl"))}, nil
	}
}

func spec(cont string, ser v1alpha1.Serialization, mode v1alpha1.LayoutMode) *v1alpha1.KollectSnapshotSinkSpec {
	return &v1alpha1.KollectSnapshotSinkSpec{Type: v1alpha1.SnapshotSinkAzureBlob,
		AzureBlob: &v1alpha1.AzureBlobSinkConfig{Account: server.Account, Container: cont, Prefix: "inv", Endpoint: server.Endpoint,
			SecretRef: v1alpha1.SecretReference{Name: "azure"}},
		Serialization: ser, Layout: v1alpha1.Layout{Mode: mode}}
}

func newSink(t testing.TB, cluster, cont string, ser v1alpha1.Serialization, mode v1alpha1.LayoutMode, cred string) *Sink {
	t.Helper()
	s, err := open(context.Background(), spec(cont, ser, mode), sink.Env{Cluster: cluster, Namespace: "kollect", Name: "azure",
		Secrets: secrets(cred), Log: logr.Discard()})
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
	sink     *Sink
	prev     *export.Snapshot
	gen      int64
	coverage []export.Coverage
}

func (e *exporter) export(t testing.TB, rows ...export.Row) Stats {
	t.Helper()
	snap := export.NewSnapshot(append([]export.Row(nil), rows...))
	e.gen++
	b := &sink.Batch{
		Envelope: export.Envelope{SchemaVersion: export.SchemaVersion, Cluster: e.sink.env.Cluster, Inventory: "workloads",
			Generation: e.gen, ExportedAt: time.Now(), ItemCount: snap.Len(), Checksum: snap.Checksum, Rows: snap.Rows,
			Coverage: e.coverage},
		Diff: export.Compute(e.prev, snap),
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

func verifyManifest(t testing.TB, cont, cluster string) *snapshot.Manifest {
	t.Helper()
	m, err := snapshot.ParseManifest(download(t, cont, "inv/"+cluster+"/workloads.manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range m.Files {
		sum := sha256.Sum256(download(t, cont, "inv/"+f.Path))
		if hex.EncodeToString(sum[:]) != f.SHA256 {
			t.Errorf("%s: stored hash differs from the manifest", f.Path)
		}
	}
	return m
}

// TestBlobsManifestAndPrune: against the Azure Storage emulator, an export writes one blob
// per namespace (NDJSON, gzip) and the manifest, leaves another cluster's blob alone, writes
// nothing when nothing changed, rewrites only the changed document and prunes the document
// of a namespace that emptied; with a shared access signature and with the account key.
func TestBlobsManifestAndPrune(t *testing.T) {
	for _, cred := range []string{"sas", "key"} {
		t.Run(cred, func(t *testing.T) {
			cont := newContainer(t)
			if st, body, _, err := server.Do("PUT", "/"+cont+"/inv/west/workloads/shop.ndjson.gz", strings.NewReader("x"),
				http.Header{"X-Ms-Blob-Type": {"BlockBlob"}}); err != nil || st != http.StatusCreated {
				t.Fatalf("planting west's blob: %d %s %v", st, body, err)
			}
			e := &exporter{sink: newSink(t, "east", cont, v1alpha1.Serialization{Format: "ndjson", Compression: "gzip"}, v1alpha1.LayoutByNamespace, cred)}
			rows := []export.Row{row(t, "east", "shop", "web", 1), row(t, "east", "shop", "api", 2), row(t, "east", "ops", "probe", 3)}
			if st := e.export(t, rows...); st.Written != 2 {
				t.Fatalf("%+v", st)
			}
			want := []string{"inv/east/workloads.manifest.json", "inv/east/workloads/ops.ndjson.gz", "inv/east/workloads/shop.ndjson.gz", "inv/west/workloads/shop.ndjson.gz"}
			if got := names(t, cont); strings.Join(got, " ") != strings.Join(want, " ") {
				t.Fatalf("blobs %v", got)
			}
			raw, err := snapshot.Decompress(v1alpha1.CompressionGzip, download(t, cont, want[2]))
			if err != nil {
				t.Fatal(err)
			}
			if lines := strings.Split(strings.TrimSpace(string(raw)), "\n"); len(lines) != 2 || lines[0] != string(e.prev.Rows[1].CanonicalJSON()) {
				t.Fatalf("shop document: %s", raw)
			}
			if _, h := rest(t, "HEAD", "/"+cont+"/"+want[2]); h.Get("Content-Type") != e.sink.opts.ContentType() || h.Get("X-Ms-Meta-Kollect_sha256") == "" {
				t.Fatalf("shop document's headers: %v", h)
			}
			if m := verifyManifest(t, cont, "east"); m.ItemCount != 3 || m.Checksum != e.prev.Checksum {
				t.Fatalf("manifest %+v", m)
			}
			before := etags(t, cont)
			if st := e.export(t, rows...); st.ManifestWritten || st.Written != 0 {
				t.Fatalf("unchanged export wrote %+v", st)
			}
			if after := etags(t, cont); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Fatalf("an unchanged export changed ETags: %v -> %v", before, after)
			}
			rows[0] = row(t, "east", "shop", "web", 7)
			if st := e.export(t, rows...); st.Written != 1 || st.Unchanged != 1 {
				t.Fatalf("changed row: %+v", st)
			}
			if after := etags(t, cont); after[want[1]] != before[want[1]] || after[want[2]] == before[want[2]] || after[want[3]] != before[want[3]] {
				t.Fatalf("a changed row in shop: ETags %v -> %v", before, after)
			}
			if st := e.export(t, rows[0], rows[1]); st.Deleted != 1 {
				t.Fatalf("deleted namespace: %+v", st)
			}
			if got := names(t, cont); strings.Join(got, " ") != strings.Join([]string{want[0], want[2], want[3]}, " ") {
				t.Fatalf("after prune %v", got)
			}
			verifyManifest(t, cont, "east")
		})
	}
}

// TestManifestWriteIsConditional: a manifest replaced since it was read is not overwritten
// (If-Match), an existing one is not created anew (If-None-Match: *); the next export reads
// the current manifest and succeeds.
func TestManifestWriteIsConditional(t *testing.T) {
	cont := newContainer(t)
	s := newSink(t, "east", cont, v1alpha1.Serialization{}, v1alpha1.LayoutDocument, "sas")
	e := &exporter{sink: s}
	e.export(t, row(t, "east", "a", "b", 1))
	key := "inv/east/workloads.manifest.json"
	_, etag, err := s.readManifest(context.Background(), key)
	if err != nil || etag == "" {
		t.Fatalf("etag %q: %v", etag, err)
	}
	if st, body, _, err := server.Do("PUT", "/"+cont+"/"+key, strings.NewReader(`{"checksum":"other"}`),
		http.Header{"X-Ms-Blob-Type": {"BlockBlob"}}); err != nil || st != http.StatusCreated {
		t.Fatalf("another writer's manifest: %d %s %v", st, body, err)
	}
	err = s.putManifest(context.Background(), key, []byte(`{}`), etag)
	if err == nil || sink.ClassOf(err) != sink.Transient || !strings.Contains(err.Error(), errConflict.Error()) {
		t.Fatalf("stale If-Match: %v", err)
	}
	if err := s.putManifest(context.Background(), key, []byte(`{}`), ""); err == nil || !strings.Contains(err.Error(), errConflict.Error()) {
		t.Fatalf("If-None-Match on an existing manifest: %v", err)
	}
	if got := string(download(t, cont, key)); got != `{"checksum":"other"}` {
		t.Fatalf("the refused writes changed the manifest: %s", got)
	}
	e.export(t, row(t, "east", "a", "b", 2))
	verifyManifest(t, cont, "east")
}

// TestObjectStoreContract runs the object stores' shared contract (writer check,
// confirmation, writer naming, coverage) against the Azure Storage emulator.
func TestObjectStoreContract(t *testing.T) {
	sinktest.ObjectStoreContract(t, func(t *testing.T) sinktest.ObjectStore {
		cont := newContainer(t)
		return sinktest.ObjectStore{
			Open: func(cluster string, ser v1alpha1.Serialization, mode v1alpha1.LayoutMode) sinktest.ObjectSink {
				return newSink(t, cluster, cont, ser, mode, "sas")
			},
			Prefix:   "inv/",
			Versions: func() map[string]string { return etags(t, cont) },
			Read:     func(name string) []byte { return download(t, cont, name) },
		}
	})
}
