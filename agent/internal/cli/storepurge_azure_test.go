package cli

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"sort"
	"strings"
	"testing"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/azureblob"
	"kollect.dev/agent/internal/sink/sinktest"
	"kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// TestSinksPurgeAzureBlob runs the command's story against Azurite (the Azure Storage
// emulator, a stand-in for Azure Blob Storage): an azureblob sink in the per-resource layout,
// one blob per row, whose names and ETags the test lists through the Blob REST API. The
// command reads a shared access signature from AZURE_STORAGE_SAS_TOKEN.
func TestSinksPurgeAzureBlob(t *testing.T) {
	srv, err := testenv.StartAzurite()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	ctx := context.Background()
	const cont = "purge-cli"
	if err := srv.CreateContainer(cont); err != nil {
		t.Fatal(err)
	}
	t.Setenv(azureblob.EnvSASToken, srv.AccountSAS("rdl"))
	get := func(path string) []byte {
		st, body, _, err := srv.Do("GET", path, nil, nil)
		if err != nil || st != 200 {
			t.Fatalf("GET %s: %d %s %v", path, st, body, err)
		}
		return body
	}
	listing := func(cluster string) map[string]string {
		var out struct {
			Blobs []struct {
				Name string `xml:"Name"`
				ETag string `xml:"Properties>Etag"`
			} `xml:"Blobs>Blob"`
		}
		if err := xml.Unmarshal(get("/"+cont+"?restype=container&comp=list&prefix=fleet/"+cluster+"/"), &out); err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, b := range out.Blobs {
			m[b.Name] = b.ETag
		}
		return m
	}
	testPurge(t, purgeFixture{
		objects: true,
		flags:   []string{"--azureblob", srv.Account + "/" + cont + "/fleet", "--endpoint", srv.Endpoint},
		sinkOf: func(cluster string) sink.Sink {
			s, err := azureblob.New(ctx, &v1alpha1.KollectSnapshotSink{Spec: v1alpha1.KollectSnapshotSinkSpec{Type: v1alpha1.SnapshotSinkAzureBlob,
				AzureBlob: &v1alpha1.AzureBlobSinkConfig{Account: srv.Account, Container: cont, Prefix: "fleet", Endpoint: srv.Endpoint,
					SecretRef: v1alpha1.SecretReference{Name: "sas"}},
				Layout: v1alpha1.Layout{Mode: v1alpha1.LayoutPerResource}}},
				sink.Env{Cluster: cluster, Namespace: "shop", Name: "container", Secrets: sinktest.Secrets(map[string]map[string][]byte{
					"sas": {azureblob.KeySASToken: []byte(srv.AccountSAS("racwdl"))}})})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		// Documents, the coverage entries the manifests list, manifests.
		counts: func(cluster string) [3]int {
			var out [3]int
			for name := range listing(cluster) {
				if !strings.HasSuffix(name, ".manifest.json") {
					out[0]++
					continue
				}
				var m struct{ Coverage []export.Coverage }
				if err := json.Unmarshal(get("/"+cont+"/"+name), &m); err != nil {
					t.Fatal(err)
				}
				out[1] += len(m.Coverage)
				out[2]++
			}
			return out
		},
		fingerprint: func(cluster string) string {
			var parts []string
			for k, etag := range listing(cluster) {
				parts = append(parts, k+"@"+etag)
			}
			sort.Strings(parts)
			return strings.Join(parts, ",")
		},
	})
}
