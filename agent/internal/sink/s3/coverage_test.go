package s3

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink/sinktest"
	"kollect.dev/api/v1alpha1"
)

func complete(target string, rows int64) export.Coverage {
	return export.Coverage{Target: target, State: v1alpha1.CoverageComplete, Rows: rows}
}

func forbidden(target string, rows int64) export.Coverage {
	return export.Coverage{Target: target, State: v1alpha1.CoverageForbidden, Rows: rows,
		Reason: `cronjobs.batch is forbidden: User "system:serviceaccount:kollect:agent" cannot list resource "cronjobs"`}
}

// TestDocumentedCoverageRead runs the read docs/sinks/s3.md documents, "which targets of
// cluster east are complete", with s3cmd (a client of its own) against versitygw.
func TestDocumentedCoverageRead(t *testing.T) {
	bucket := newBucket(t)
	s := newSink(t, "east", bucket, v1alpha1.Serialization{Format: v1alpha1.FormatNDJSON}, v1alpha1.LayoutDocument, nil)
	e := &exporter{sink: s, coverage: []export.Coverage{forbidden("apps/crons", 2), complete("apps/deploys", 1), complete("ops/deploys", 1)}}
	e.export(t, row(t, "east", "shop", "web", 2), row(t, "east", "ops", "probe", 1))

	line := sinktest.DocCommand(t, "s3.md", "| jq")
	documented := "s3://fleet-inventory/kollect/east/pods.manifest.json"
	if !strings.Contains(line, documented) {
		t.Fatalf("the documented read no longer names %s: %s", documented, line)
	}
	line = strings.Replace(line, documented, "s3://"+bucket+"/fleet/east/workloads.manifest.json", 1)
	home := t.TempDir()
	host := strings.TrimPrefix(server.Endpoint, "http://")
	cfg := fmt.Sprintf("[default]\naccess_key = %s\nsecret_key = %s\nhost_base = %s\nhost_bucket = %s\nuse_https = False\nbucket_location = %s\nsignature_v2 = False\n",
		server.AccessKey, server.SecretKey, host, host, server.Region)
	if err := os.WriteFile(filepath.Join(home, ".s3cfg"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, want := sinktest.Shell(t, home, []string{"HOME=" + home}, line), "apps/deploys\nops/deploys\n"; got != want {
		t.Fatalf("%s\nprints %q, want %q", line, got, want)
	}
}
