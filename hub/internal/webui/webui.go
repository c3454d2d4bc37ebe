package webui

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed all:dist
var embedded embed.FS

// Handler serves the dashboard embedded in this binary.
func Handler() http.Handler {
	sub, err := fs.Sub(embedded, "dist")
	if err != nil {
		panic(err) // dist is fixed at compile time; a failure here is a build bug
	}
	h, err := New(sub)
	if err != nil {
		panic(fmt.Errorf("loading the embedded dashboard: %w", err))
	}
	return h
}

// file is one servable file with its precomputed encodings.
type file struct {
	data, gz    []byte
	contentType string
	etag        string
	modTime     time.Time
}

// handler serves the files of one dashboard build.
type handler struct {
	files map[string]*file // by path without the leading slash
	index *file            // nil when the dashboard was not built
}

// compressible lists the extensions worth gzipping; images and fonts are compressed already.
var compressible = map[string]bool{".js": true, ".mjs": true, ".css": true, ".html": true, ".svg": true,
	".json": true, ".map": true, ".txt": true, ".webmanifest": true}

// New loads every file of a dashboard build (the contents of vite's outDir) into memory. A
// build without index.html is served as "not built".
func New(files fs.FS) (http.Handler, error) {
	h := &handler{files: map[string]*file{}}
	err := fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(path.Base(p), ".") {
			return err
		}
		data, err := fs.ReadFile(files, p)
		if err != nil {
			return fmt.Errorf("reading %s: %w", p, err)
		}
		f := &file{data: data, contentType: mime.TypeByExtension(path.Ext(p))}
		if f.contentType == "" {
			f.contentType = http.DetectContentType(data)
		}
		if info, err := d.Info(); err == nil {
			f.modTime = info.ModTime()
		}
		sum := sha256.Sum256(data)
		f.etag = `"` + hex.EncodeToString(sum[:8]) + `"`
		if compressible[path.Ext(p)] && len(data) >= 512 {
			if f.gz, err = gzipBytes(data); err != nil {
				return fmt.Errorf("compressing %s: %w", p, err)
			}
			if len(f.gz) >= len(data) {
				f.gz = nil
			}
		}
		h.files[p] = f
		return nil
	})
	if err != nil {
		return nil, err
	}
	h.index = h.files["index.html"]
	return h, nil
}

func gzipBytes(data []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(data); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "no-referrer")
	// The hub serves only TLS: a browser that has seen it once never tries plain HTTP for it
	// again, where a network attacker could serve a look-alike login to the dashboard.
	w.Header().Set("Strict-Transport-Security", hsts)
	if h.index == nil {
		notBuilt(w, r)
		return
	}
	name := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
	if f, ok := h.files[name]; ok && name != "index.html" {
		if strings.HasPrefix(name, "assets/") {
			// vite names assets by their content hash: a changed file gets a new name.
			w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
		} else {
			w.Header().Set("Cache-Control", "no-cache")
		}
		serve(w, r, f)
		return
	}
	if strings.HasPrefix(name, "assets/") {
		// A missing hashed asset is an old build's: index.html in its place would be parsed as
		// JavaScript and fail obscurely.
		http.NotFound(w, r)
		return
	}
	// Deep links (/clusters/east) belong to the dashboard's router. index.html names the
	// current build's assets, so it is revalidated every time.
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("Content-Security-Policy", csp)
	serve(w, r, h.index)
}

// hsts is the dashboard's Strict-Transport-Security: a year, the name only (the hub knows
// nothing of its subdomains).
const hsts = "max-age=31536000"

// csp allows the dashboard's own scripts, styles and API calls, and nothing else.
const csp = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
	"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

func serve(w http.ResponseWriter, r *http.Request, f *file) {
	w.Header().Set("Content-Type", f.contentType)
	body, etag := f.data, f.etag
	if f.gz != nil {
		w.Header().Add("Vary", "Accept-Encoding")
		if acceptsGzip(r.Header.Get("Accept-Encoding")) {
			w.Header().Set("Content-Encoding", "gzip")
			body, etag = f.gz, strings.TrimSuffix(f.etag, `"`)+`-gz"`
		}
	}
	w.Header().Set("ETag", etag)
	http.ServeContent(w, r, "", f.modTime, bytes.NewReader(body))
}

// acceptsGzip reports whether an Accept-Encoding header allows gzip (not "gzip;q=0").
func acceptsGzip(header string) bool {
	for part := range strings.SplitSeq(header, ",") {
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if !strings.EqualFold(strings.TrimSpace(coding), "gzip") && strings.TrimSpace(coding) != "*" {
			continue
		}
		q := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
		return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
	}
	return false
}

func notBuilt(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNotFound)
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write([]byte(notBuiltPage))
}

const notBuiltPage = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Kollect hub: dashboard not built</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:40rem;margin:4rem auto;padding:0 1rem}
code{background:#8882;padding:.1em .3em;border-radius:3px}</style></head>
<body><h1>The dashboard was not built into this binary</h1>
<p>This kollect-hub was compiled without the web dashboard, so there is nothing to show here.
The hub itself works: agents and the <code>kollect hub</code> CLI use its API on this port.</p>
<p>To get the dashboard, build the hub with <code>make build</code> from the repository root
(it runs <code>make web</code>, which needs Node.js and npm, before compiling the Go binaries).</p>
</body></html>
`
