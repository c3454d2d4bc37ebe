package gcs

import (
	"encoding/json"
	"strings"
	"testing"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink/sinktest"
	"kollect.dev/api/v1alpha1"
)

func complete(target string, rows int64) export.Coverage {
	return export.Coverage{Target: target, State: v1alpha1.CoverageComplete, Rows: rows}
}

func notServed(target string, rows int64) export.Coverage {
	return export.Coverage{Target: target, State: v1alpha1.CoverageKindNotServed, Rows: rows,
		Reason: "the cluster does not serve batch/v1beta1 CronJob"}
}

// generations maps every object of the bucket to its generation, as the emulator reports it.
func generations(t *testing.T, bucket string) map[string]string {
	t.Helper()
	var out struct {
		Items []struct{ Name, Generation string } `json:"items"`
	}
	if err := json.Unmarshal(api(t, "GET", "/storage/v1/b/"+bucket+"/o", nil), &out); err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, it := range out.Items {
		m[it.Name] = it.Generation
	}
	return m
}

// TestObjectStoreContract runs the object stores' shared contract (writer check,
// confirmation, writer naming, coverage) against the GCS emulator (a stand-in for GCS), the
// objects' generations showing what was written.
func TestObjectStoreContract(t *testing.T) {
	sinktest.ObjectStoreContract(t, func(t *testing.T) sinktest.ObjectStore {
		bucket := newBucket(t)
		return sinktest.ObjectStore{
			Open: func(cluster string, ser v1alpha1.Serialization, mode v1alpha1.LayoutMode) sinktest.ObjectSink {
				return newSink(t, cluster, bucket, server.Endpoint, ser, mode)
			},
			Prefix:   "inv/",
			Versions: func() map[string]string { return generations(t, bucket) },
			Read:     func(name string) []byte { return download(t, bucket, name) },
		}
	})
}

// TestDocumentedCoverageRead runs the read docs/sinks/gcs.md documents, "which targets of
// cluster east are complete", with curl and jq against the emulator's JSON API.
func TestDocumentedCoverageRead(t *testing.T) {
	bucket := newBucket(t)
	s := newSink(t, "east", bucket, server.Endpoint, v1alpha1.Serialization{Format: v1alpha1.FormatNDJSON}, v1alpha1.LayoutDocument)
	e := &exporter{sink: s, coverage: []export.Coverage{notServed("apps/crons", 2), complete("apps/deploys", 1), complete("ops/deploys", 1)}}
	e.export(t, row(t, "east", "shop", "web", 2), row(t, "east", "ops", "probe", 1))

	line := sinktest.DocCommand(t, "gcs.md", "| jq")
	documented := "https://storage.googleapis.com/storage/v1/b/fleet-lake/o/inventory%2Feast%2Fservices.manifest.json"
	if !strings.Contains(line, documented) {
		t.Fatalf("the documented read no longer names %s: %s", documented, line)
	}
	line = strings.Replace(line, documented, server.Endpoint+"/storage/v1/b/"+bucket+"/o/inv%2Feast%2Fworkloads.manifest.json", 1)
	if got, want := sinktest.Shell(t, t.TempDir(), []string{"TOKEN=emulator"}, line), "apps/deploys\nops/deploys\n"; got != want {
		t.Fatalf("%s\nprints %q, want %q", line, got, want)
	}
}
