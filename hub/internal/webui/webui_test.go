package webui

import (
	"bytes"
	"compress/gzip"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/go-chi/chi/v5"
)

var (
	indexHTML = `<!doctype html><html><head><script type="module" src="/assets/index-abc123.js"></script></head><body><div id="root"></div></body></html>`
	appJS     = strings.Repeat("export const fleet = 'every cluster';\n", 200)
)

func build() fstest.MapFS {
	return fstest.MapFS{
		".keep":                  {Data: nil},
		"index.html":             {Data: []byte(indexHTML)},
		"assets/index-abc123.js": {Data: []byte(appJS)},
		"favicon.svg":            {Data: []byte(`<svg xmlns="http://www.w3.org/2000/svg"/>`)},
	}
}

func get(t *testing.T, h http.Handler, method, target string, header http.Header) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func body(t *testing.T, resp *http.Response) string {
	t.Helper()
	var r io.Reader = resp.Body
	if resp.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func mustNew(t *testing.T, files fs.FS) http.Handler {
	t.Helper()
	h, err := New(files)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestIndexAndDeepLinksServeIndexUncached(t *testing.T) {
	h := mustNew(t, build())
	for _, p := range []string{"/", "/index.html", "/clusters/east", "/bundles/base/revisions/3", "/rollouts?bundle=x"} {
		resp := get(t, h, http.MethodGet, p, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d", p, resp.StatusCode)
		}
		if got := body(t, resp); got != indexHTML {
			t.Fatalf("%s: body %q", p, got)
		}
		if cc := resp.Header.Get("Cache-Control"); cc != "no-cache" {
			t.Errorf("%s: Cache-Control %q, want no-cache", p, cc)
		}
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
			t.Errorf("%s: Content-Type %q", p, resp.Header.Get("Content-Type"))
		}
		if !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'self'") {
			t.Errorf("%s: no CSP", p)
		}
		if resp.Header.Get("Strict-Transport-Security") != "max-age=31536000" {
			t.Errorf("%s: Strict-Transport-Security %q", p, resp.Header.Get("Strict-Transport-Security"))
		}
	}
}

func TestHashedAssetsAreImmutableAndGzipped(t *testing.T) {
	h := mustNew(t, build())
	resp := get(t, h, http.MethodGet, "/assets/index-abc123.js", http.Header{"Accept-Encoding": {"br, gzip"}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if got := resp.Header.Get("Cache-Control"); got != "public, max-age=31536000, immutable" {
		t.Errorf("Cache-Control %q", got)
	}
	if resp.Header.Get("Content-Encoding") != "gzip" || resp.Header.Get("Vary") != "Accept-Encoding" {
		t.Fatalf("encoding %q vary %q", resp.Header.Get("Content-Encoding"), resp.Header.Get("Vary"))
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/javascript") {
		t.Errorf("Content-Type %q", resp.Header.Get("Content-Type"))
	}
	if got := body(t, resp); got != appJS {
		t.Fatal("gzipped body differs from the file")
	}
	gzTag := resp.Header.Get("ETag")

	plain := get(t, h, http.MethodGet, "/assets/index-abc123.js", http.Header{"Accept-Encoding": {"gzip;q=0, identity"}})
	if plain.Header.Get("Content-Encoding") != "" || body(t, plain) != appJS {
		t.Fatalf("identity response: encoding %q", plain.Header.Get("Content-Encoding"))
	}
	if plain.Header.Get("ETag") == gzTag {
		t.Error("gzip and identity responses share an ETag")
	}

	again := get(t, h, http.MethodGet, "/assets/index-abc123.js", http.Header{"Accept-Encoding": {"gzip"}, "If-None-Match": {gzTag}})
	if again.StatusCode != http.StatusNotModified {
		t.Errorf("revalidation: status %d, want 304", again.StatusCode)
	}
}

func TestMissingAssetIs404NotIndex(t *testing.T) {
	h := mustNew(t, build())
	resp := get(t, h, http.MethodGet, "/assets/index-old999.js", nil)
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("status %d, want 404", resp.StatusCode)
	}
}

func TestOnlyGetAndHead(t *testing.T) {
	h := mustNew(t, build())
	if resp := get(t, h, http.MethodHead, "/", nil); resp.StatusCode != http.StatusOK {
		t.Errorf("HEAD: status %d", resp.StatusCode)
	}
	resp := get(t, h, http.MethodPost, "/grpc.health.v1.Health/Check", nil)
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
		t.Fatalf("POST: status %d allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
}

func TestNotBuiltPageSaysHowToBuild(t *testing.T) {
	h := mustNew(t, fstest.MapFS{".keep": {Data: nil}})
	for _, p := range []string{"/", "/clusters/east"} {
		resp := get(t, h, http.MethodGet, p, nil)
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: status %d, want 404", p, resp.StatusCode)
		}
		b := body(t, resp)
		if !strings.Contains(b, "not built into this binary") || !strings.Contains(b, "make build") {
			t.Errorf("%s: page does not explain: %s", p, b)
		}
	}
}

// TestMountedBesideOtherRoutes mounts the dashboard the way the hub's chi router does: "/*"
// must take only what no other route claims.
func TestMountedBesideOtherRoutes(t *testing.T) {
	r := chi.NewRouter()
	r.Handle("/kollect.fleet.v1.FleetService/*", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("rpc")) }))
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	r.Handle("/metrics", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) }))
	r.Handle("/*", mustNew(t, build()))
	for path, want := range map[string]string{
		"/kollect.fleet.v1.FleetService/ListClusters": "rpc",
		"/healthz":       "ok",
		"/metrics":       "metrics",
		"/":              indexHTML,
		"/clusters/east": indexHTML,
	} {
		if got := body(t, get(t, r, http.MethodGet, path, nil)); got != want {
			t.Errorf("%s: got %q, want %q", path, got, want)
		}
	}
}

// TestEmbeddedBuildLoads checks that whatever dist held at compile time is servable: the
// dashboard after `make web`, the not-built page on a clean clone.
func TestEmbeddedBuildLoads(t *testing.T) {
	resp := get(t, Handler(), http.MethodGet, "/", nil)
	b := body(t, resp)
	switch resp.StatusCode {
	case http.StatusOK:
		if !bytes.Contains([]byte(b), []byte(`<div id="root">`)) {
			t.Fatalf("embedded index.html has no root element: %s", b)
		}
	case http.StatusNotFound:
		if !strings.Contains(b, "make build") {
			t.Fatalf("not-built page: %s", b)
		}
	default:
		t.Fatalf("status %d", resp.StatusCode)
	}
}
