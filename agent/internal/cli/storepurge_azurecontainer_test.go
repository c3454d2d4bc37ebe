package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/sas"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/azureblob"
	"kollect.dev/agent/internal/sink/sinktest"
	"kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// TestSinksPurgeAzureBlobPerClusterContainer: given the sink's container template, purge
// reads and empties the container of the cluster --cluster names, with that cluster's own
// signature, and leaves another cluster's container as it was (its blobs and ETags, listed by
// the administrator). Against Azurite, a stand-in for Azure Blob Storage.
func TestSinksPurgeAzureBlobPerClusterContainer(t *testing.T) {
	srv, err := testenv.StartAzurite()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const templ = "kollect-{cluster}"
	for _, c := range []string{"east", "west"} {
		if err := srv.CreateContainer("kollect-" + c); err != nil {
			t.Fatal(err)
		}
		s, err := azureblob.New(ctx, &v1alpha1.KollectSnapshotSink{Spec: v1alpha1.KollectSnapshotSinkSpec{Type: v1alpha1.SnapshotSinkAzureBlob,
			AzureBlob: &v1alpha1.AzureBlobSinkConfig{Account: srv.Account, Container: templ, Prefix: "fleet", Endpoint: srv.Endpoint,
				SecretRef: v1alpha1.SecretReference{Name: "sas"}}}},
			sink.Env{Cluster: c, Namespace: "shop", Name: "container", Secrets: sinktest.Secrets(map[string]map[string][]byte{
				"sas": {azureblob.KeySASToken: []byte(srv.AccountSAS("racwdl"))}})})
		if err != nil {
			t.Fatal(err)
		}
		rows := []export.Row{{Origin: &export.Origin{Cluster: c, Inventory: "pods", Target: "pods", Version: "v1", Kind: "Pod"},
			Namespace: "ns", Name: "pod", UID: c + "-1"}}
		ex := sinktest.Exporter{Cluster: c}
		if err := ex.Export(ctx, s, export.NewSnapshot(rows)); err != nil {
			t.Fatalf("export of %s: %v", c, err)
		}
	}
	listing := func(cont string) string {
		st, body, _, err := srv.Do("GET", "/"+cont+"?restype=container&comp=list", nil, nil)
		if err != nil || st != 200 {
			t.Fatalf("listing %s: %d %s %v", cont, st, body, err)
		}
		return string(body)
	}
	westBefore := listing("kollect-west")
	if !strings.Contains(westBefore, "fleet/west/pods.manifest.json") || !strings.Contains(listing("kollect-east"), "fleet/east/pods.manifest.json") {
		t.Fatalf("the exports did not land in their containers:\n%s\n%s", westBefore, listing("kollect-east"))
	}
	sig, err := containerSAS(srv, "kollect-east")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(azureblob.EnvSASToken, sig) // east's own signature: it may not read kollect-west
	out, errOut, code := run(t, "", "sinks", "purge", "--azureblob", srv.Account+"/"+templ+"/fleet", "--endpoint", srv.Endpoint,
		"--cluster", "east", "--force")
	if code != ExitOK || !strings.Contains(out, "azureblob:"+srv.Account+"/kollect-east/fleet") {
		t.Fatalf("purge of east: exit %d: %s%s", code, out, errOut)
	}
	if l := listing("kollect-east"); strings.Contains(l, "<Name>") {
		t.Fatalf("kollect-east holds blobs after the purge:\n%s", l)
	}
	if after := listing("kollect-west"); after != westBefore {
		t.Fatalf("kollect-west changed:\n%s\nbecame\n%s", westBefore, after)
	}
	if _, errOut, code := run(t, "", "sinks", "purge", "--azureblob", srv.Account+"/"+templ+"/fleet", "--endpoint", srv.Endpoint,
		"--cluster", "Prod"); code == ExitOK || !strings.Contains(errOut, "--azureblob") || !strings.Contains(errOut, "lowercase") {
		t.Fatalf("purge of cluster Prod with a container template: exit %d: %s", code, errOut)
	}
}

// containerSAS signs a container signature for name alone with the emulator's account key,
// as `az storage container generate-sas` does.
func containerSAS(srv *testenv.Azurite, name string) (string, error) {
	key, err := container.NewSharedKeyCredential(srv.Account, srv.Key)
	if err != nil {
		return "", err
	}
	q, err := sas.BlobSignatureValues{Protocol: sas.ProtocolHTTPSandHTTP, ExpiryTime: time.Now().Add(time.Hour),
		Permissions: "rdl", ContainerName: name}.SignWithSharedKey(key)
	if err != nil {
		return "", fmt.Errorf("signing for %s: %w", name, err)
	}
	return q.Encode(), nil
}
