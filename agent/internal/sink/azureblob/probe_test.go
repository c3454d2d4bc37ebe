package azureblob

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"kollect.dev/agent/internal/sink"
	v1alpha1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// openWithSecret builds a sink of the emulator's container cont whose Secret holds data.
func openWithSecret(t *testing.T, cont, endpoint string, data map[string][]byte) (*Sink, error) {
	t.Helper()
	sp := spec(cont, v1alpha1.Serialization{}, v1alpha1.LayoutDocument)
	sp.AzureBlob.Endpoint = endpoint
	return open(context.Background(), sp, sink.Env{Cluster: "east", Namespace: "kollect", Name: "azure", Log: logr.Discard(),
		Secrets: func(context.Context, string) (map[string][]byte, error) { return data, nil }})
}

// TestProbeAndPreview: the probe passes on a container the credential may list; a missing
// container, a refused key or signature and a signature without the permissions the sink
// needs are terminal, an unreachable endpoint transient, each with a message that names the
// cause and never the credential; a Secret without a usable credential is refused before any
// request. Neither probe nor preview writes.
func TestProbeAndPreview(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cont := newContainer(t)
	if err := newSink(t, "east", cont, v1alpha1.Serialization{}, "", "sas").Probe(ctx); err != nil {
		t.Fatalf("probe: %v", err)
	}
	good := server.AccountSAS("racwdl")
	q, _ := url.ParseQuery(good)
	forged := strings.Replace(good, url.QueryEscape(q.Get("sig")), url.QueryEscape("Zm9yZ2VkLXNpZ25hdHVyZS1vZi10aGUtdGVzdA=="), 1)
	wrongKey := "d3Jvbmcta2V5LW9mLXRoZS10ZXN0LWFjY291bnQ="
	port, _ := testenv.FreePort()
	for name, tc := range map[string]struct {
		cont, endpoint string
		secret         map[string][]byte
		class          sink.ErrorClass
		cause          string
		secrets        []string
	}{
		"missing container": {"no-such-container", server.Endpoint, map[string][]byte{KeySASToken: []byte(good)}, sink.Terminal,
			"ContainerNotFound (HTTP 404): the container does not exist", []string{q.Get("sig")}},
		"wrong account key": {cont, server.Endpoint, map[string][]byte{KeyAccountKey: []byte(wrongKey)}, sink.Terminal,
			"AuthorizationFailure", []string{wrongKey}},
		"forged signature": {cont, server.Endpoint, map[string][]byte{KeySASToken: []byte(forged)}, sink.Terminal,
			"AuthorizationFailure", []string{"Zm9yZ2Vk", q.Get("sig")}},
		"signature without list": {cont, server.Endpoint, map[string][]byte{KeySASToken: []byte(server.AccountSAS("rw"))}, sink.Terminal,
			"AuthorizationPermissionMismatch (HTTP 403): the shared access signature lacks a permission", nil},
		"unreachable": {cont, fmt.Sprintf("http://127.0.0.1:%d/%s", port, server.Account), map[string][]byte{KeySASToken: []byte(good)},
			sink.Transient, "connection refused", []string{q.Get("sig"), "sig="}},
	} {
		s, err := openWithSecret(t, tc.cont, tc.endpoint, tc.secret)
		if err == nil {
			err = s.Probe(ctx)
		}
		if err == nil || sink.ClassOf(err) != tc.class || !strings.Contains(err.Error(), tc.cause) {
			t.Errorf("%s: want %s naming %q, got %v", name, tc.class, tc.cause, err)
			continue
		}
		t.Logf("%s: %v", name, err)
		for _, secret := range tc.secrets {
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), url.QueryEscape(secret)) {
				t.Errorf("%s: the error shows the credential %q: %v", name, secret, err)
			}
		}
	}
	for name, tc := range map[string]struct {
		secret map[string][]byte
		want   string
	}{
		"empty":        {map[string][]byte{}, "needs sasToken (a shared access signature) or accountKey"},
		"both":         {map[string][]byte{KeySASToken: []byte(good), KeyAccountKey: []byte(server.Key)}, "holds both sasToken and accountKey"},
		"not a SAS":    {map[string][]byte{KeySASToken: []byte("s3cr3t-but-no-signature")}, "sasToken is not a shared access signature"},
		"not a base64": {map[string][]byte{KeyAccountKey: []byte("s3cr3t-not-base64!")}, "accountKey is not a base64 account key"},
	} {
		_, err := openWithSecret(t, cont, server.Endpoint, tc.secret)
		if err == nil || sink.ClassOf(err) != sink.Terminal || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("secret %s: want a terminal error saying %q, got %v", name, tc.want, err)
		}
	}
	sp := spec(cont, v1alpha1.Serialization{}, "")
	sp.AzureBlob.Endpoint = server.Endpoint + "?sv=2021-08-06&sig=abc"
	if _, err := open(ctx, sp, sink.Env{Secrets: secrets("sas"), Log: logr.Discard()}); err == nil || strings.Contains(err.Error(), "sig=abc") {
		t.Errorf("an endpoint with a query string: %v", err)
	}

	p, err := newSink(t, "east", cont, v1alpha1.Serialization{Format: "parquet"}, v1alpha1.LayoutPerResource, "sas").Preview(ctx, "east", "workloads")
	if err != nil {
		t.Fatal(err)
	}
	if p.Destination != server.Endpoint+"/"+cont+"/inv/" ||
		strings.Join(p.Paths, " ") != "inv/east/workloads/<namespace>/<kind>/<name>.parquet inv/east/workloads.manifest.json" {
		t.Errorf("preview %+v", p)
	}
	if got := names(t, cont); len(got) != 0 {
		t.Errorf("probe or preview wrote %v", got)
	}
}

// TestDefaultEndpoint: without an endpoint the sink addresses the account's public blob
// service (no request is made).
func TestDefaultEndpoint(t *testing.T) {
	s, err := openWithSecret(t, "inventory", "", map[string][]byte{KeySASToken: []byte(server.AccountSAS("rl"))})
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := s.Preview(context.Background(), "east", "apps"); p.Destination != "https://"+server.Account+".blob.core.windows.net/inventory/inv/" {
		t.Fatalf("preview %+v", p)
	}
}

// TestCustomCA reaches an emulator serving HTTPS with a certificate of its own authority:
// refused (terminally) without the CA, exporting with the CA from tls.caSecretRef.
func TestCustomCA(t *testing.T) {
	tlsServer, err := testenv.StartAzuriteWith(testenv.AzuriteOptions{TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tlsServer.Stop()
	if err := tlsServer.CreateContainer("secure"); err != nil {
		t.Fatal(err)
	}
	build := func(withCA bool) *Sink {
		sp := spec("secure", v1alpha1.Serialization{}, v1alpha1.LayoutDocument)
		sp.AzureBlob.Endpoint = tlsServer.Endpoint
		if withCA {
			sp.AzureBlob.TLS = &v1alpha1.TLSConfig{CASecretRef: &v1alpha1.SecretKeySelector{Name: "ca", Key: "ca.crt"}}
		}
		s, err := open(context.Background(), sp, sink.Env{Cluster: "east", Log: logr.Discard(), Secrets: func(_ context.Context, name string) (map[string][]byte, error) {
			if name == "ca" {
				return map[string][]byte{"ca.crt": tlsServer.CAPEM}, nil
			}
			return map[string][]byte{KeyAccountKey: []byte(tlsServer.Key)}, nil
		}})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if err := build(false).Probe(context.Background()); err == nil || sink.ClassOf(err) != sink.Terminal {
		t.Fatalf("unknown authority: want a terminal error, got %v", err)
	}
	s := build(true)
	(&exporter{sink: s}).export(t, row(t, "east", "a", "b", 1))
	st, body, _, err := tlsServer.Do("GET", "/secure/inv/east/workloads.yaml", nil, nil)
	if err != nil || st != 200 || !strings.Contains(string(body), "replicas: 1") {
		t.Fatalf("the document over HTTPS: %d %s %v", st, body, err)
	}
}
