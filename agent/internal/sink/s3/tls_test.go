package s3

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

// TestCustomCA reaches versitygw through a TLS front with its own certificate authority:
// refused (terminally) without the CA, working with the CA from tls.caSecretRef.
func TestCustomCA(t *testing.T) {
	bucket := newBucket(t)
	backend, _ := url.Parse(server.Endpoint)
	// The proxy keeps the Host header the client signed, so SigV4 still verifies.
	front := httptest.NewTLSServer(httputil.NewSingleHostReverseProxy(backend))
	defer front.Close()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: front.Certificate().Raw})
	build := func(withCA bool) *Sink {
		spec := &v1alpha1.KollectSnapshotSinkSpec{Type: v1alpha1.SnapshotSinkS3,
			S3: &v1alpha1.S3SinkConfig{Bucket: bucket, Endpoint: front.URL, UsePathStyle: true, SecretRef: &v1alpha1.SecretReference{Name: "keys"}}}
		if withCA {
			spec.S3.TLS = &v1alpha1.TLSConfig{CASecretRef: &v1alpha1.SecretKeySelector{Name: "ca", Key: "ca.crt"}}
		}
		env := sink.Env{Cluster: "east", Log: logr.Discard(), Secrets: func(_ context.Context, name string) (map[string][]byte, error) {
			if name == "ca" {
				return map[string][]byte{"ca.crt": caPEM}, nil
			}
			return map[string][]byte{"accessKeyID": []byte(server.AccessKey), "secretAccessKey": []byte(server.SecretKey)}, nil
		}}
		s, err := open(context.Background(), spec, env)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if err := build(false).Probe(context.Background()); err == nil || sink.ClassOf(err) != sink.Terminal {
		t.Fatalf("unknown authority: want a terminal error, got %v", err)
	}
	s := build(true)
	if err := s.Probe(context.Background()); err != nil {
		t.Fatalf("probe with the CA: %v", err)
	}
	e := &exporter{sink: s}
	e.export(t, row(t, "east", "a", "b", 1))
	if ks := keys(t, bucket); len(ks) != 2 {
		t.Fatalf("keys %v", ks)
	}
}
