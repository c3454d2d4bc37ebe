package gitrepo

import (
	"context"
	"encoding/pem"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"

	"github.com/go-logr/logr"

	"kollect.dev/agent/internal/sink"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

// TestHTTPSWithCustomCA puts a TLS front with its own certificate authority before the real
// git server: the sink must refuse it without the CA and push through it with the CA read from
// tls.caSecretRef.
func TestHTTPSWithCustomCA(t *testing.T) {
	tlsRepo := uniqueRepo("tls")
	if _, err := gitServer.InitBareRepo(tlsRepo); err != nil {
		t.Fatal(err)
	}
	backend, _ := url.Parse(gitServer.URL)
	front := httptest.NewTLSServer(httputil.NewSingleHostReverseProxy(backend))
	defer front.Close()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: front.Certificate().Raw})

	build := func(withCA bool) *Sink {
		cfg := &v1alpha1.GitSinkConfig{URL: front.URL + "/" + tlsRepo, Branch: "main", SecretRef: &v1alpha1.SecretReference{Name: "creds"}}
		if withCA {
			cfg.TLS = &v1alpha1.TLSConfig{CASecretRef: &v1alpha1.SecretKeySelector{Name: "ca", Key: "ca.crt"}}
		}
		env := sink.Env{Cluster: "east", CacheDir: t.TempDir(), Log: logr.Discard(),
			Secrets: func(_ context.Context, name string) (map[string][]byte, error) {
				if name == "ca" {
					return map[string][]byte{"ca.crt": caPEM}, nil
				}
				return map[string][]byte{"username": []byte(user), "password": []byte(pass)}, nil
			}}
		s, err := Open(context.Background(), cfg, v1alpha1.Serialization{}, v1alpha1.Layout{}, env, "oauth2")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if err := build(false).Probe(context.Background()); err == nil || sink.ClassOf(err) != sink.Terminal {
		t.Fatalf("a certificate from an unknown authority: want a terminal error, got %v", err)
	}
	s := build(true)
	if err := s.Probe(context.Background()); err != nil {
		t.Fatalf("probe with the CA: %v", err)
	}
	e := &exporter{sink: s}
	if res := e.export(t, context.Background(), pod(t, "east", "shop", "web", 1)); res.Commit.IsZero() {
		t.Fatal("no commit over HTTPS")
	}
	dir := clone(t, "http://"+user+":"+pass+"@"+backend.Host+"/"+tlsRepo)
	if files := git(t, dir, "ls-files"); files != "east/workloads.yaml" {
		t.Fatalf("files %q", files)
	}
}
