package azureblob

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"sigs.k8s.io/yaml"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
	"kollect.dev/agent/internal/sink/snapshot"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

// TestDocumentedExampleExports applies the KollectSnapshotSink of
// docs/examples/snapshot-azureblob.yaml to the Azure Storage emulator, only the endpoint (and
// the account, which the emulator names) and the Secret's signature swapped for the
// emulator's: the documented serialization, layout and prefix produce gzip'd NDJSON blobs per
// namespace under fleet/ with their manifest.
func TestDocumentedExampleExports(t *testing.T) {
	var found *v1alpha1.KollectSnapshotSink
	var secretKeys []string
	for _, doc := range bytes.Split(sinktest.DocFile(t, "examples/snapshot-azureblob.yaml"), []byte("\n---\n")) {
		var head struct {
			Kind       string            `json:"kind"`
			StringData map[string]string `json:"stringData"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			t.Fatal(err)
		}
		switch head.Kind {
		case "KollectSnapshotSink":
			found = &v1alpha1.KollectSnapshotSink{}
			if err := yaml.UnmarshalStrict(doc, found); err != nil {
				t.Fatal(err)
			}
		case "Secret":
			for k := range head.StringData {
				secretKeys = append(secretKeys, k)
			}
		}
	}
	if found == nil || found.Spec.AzureBlob == nil || strings.Join(secretKeys, ",") != KeySASToken {
		t.Fatalf("the example has no azureblob sink with a sasToken Secret: %+v, %v", found, secretKeys)
	}
	cont := newContainer(t)
	sp := found.Spec
	sp.AzureBlob.Account, sp.AzureBlob.Container, sp.AzureBlob.Endpoint = server.Account, cont, server.Endpoint
	s, err := open(context.Background(), &sp, sink.Env{Cluster: "east", Namespace: "kollect", Name: found.Name, Secrets: secrets("sas"), Log: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	(&exporter{sink: s}).export(t, row(t, "east", "shop", "web", 2), row(t, "east", "ops", "probe", 1))
	want := "fleet/east/workloads.manifest.json fleet/east/workloads/ops.ndjson.gz fleet/east/workloads/shop.ndjson.gz"
	if got := strings.Join(names(t, cont), " "); got != want {
		t.Fatalf("the documented sink stored %s, want %s", got, want)
	}
	if _, err := snapshot.Decompress(v1alpha1.CompressionGzip, download(t, cont, "fleet/east/workloads/shop.ndjson.gz")); err != nil {
		t.Fatal(err)
	}
}

// TestDocumentedCoverageRead runs the read docs/sinks/azureblob.md documents, "which targets
// of cluster east are complete", with curl and jq against the emulator and a shared access
// signature in $SAS.
func TestDocumentedCoverageRead(t *testing.T) {
	cont := newContainer(t)
	s := newSink(t, "east", cont, v1alpha1.Serialization{Format: v1alpha1.FormatNDJSON}, v1alpha1.LayoutDocument, "key")
	e := &exporter{sink: s, coverage: []export.Coverage{
		{Target: "apps/crons", State: v1alpha1.CoverageKindNotServed, Rows: 2, Reason: "the cluster does not serve batch/v1beta1 CronJob"},
		sinktest.Complete("apps/deploys", 1), sinktest.Complete("ops/deploys", 1)}}
	e.export(t, row(t, "east", "shop", "web", 2), row(t, "east", "ops", "probe", 1))

	line := sinktest.DocCommand(t, "azureblob.md", "| jq")
	documented := "https://fleetlake.blob.core.windows.net/inventory/fleet/east/services.manifest.json"
	if !strings.Contains(line, documented) {
		t.Fatalf("the documented read no longer names %s: %s", documented, line)
	}
	line = strings.Replace(line, documented, server.Endpoint+"/"+cont+"/inv/east/workloads.manifest.json", 1)
	sas := server.AccountSAS("r")
	if got, want := sinktest.Shell(t, t.TempDir(), []string{"SAS=" + sas}, line), "apps/deploys\nops/deploys\n"; got != want {
		t.Fatalf("%s\nprints %q, want %q", line, got, want)
	}
}
