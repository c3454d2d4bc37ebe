package s3

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

func benchBatches(b *testing.B, cluster string, n int) [3]*sink.Batch {
	rows := make([]export.Row, n)
	for i := range rows {
		name := fmt.Sprintf("app-%06d", i)
		raw, err := export.EncodeAttributes(map[string]any{
			"image": "registry.example/" + name + ":1." + strconv.Itoa(i%7), "replicas": i % 5, "ready": i%3 != 0,
			"labels": map[string]any{"app": name, "tier": "web"}, "cpu": 0.25,
		})
		if err != nil {
			b.Fatal(err)
		}
		rows[i] = export.Row{Origin: &export.Origin{Cluster: cluster, Inventory: "workloads", Target: "deploys", Group: "apps", Version: "v1", Kind: "Deployment"}, Namespace: fmt.Sprintf("team-%02d", i%100), Name: name, UID: fmt.Sprintf("uid-%06d", i), Attributes: raw}
	}
	changed := append([]export.Row(nil), rows...)
	changed[n/2].Attributes = []byte(`{"replicas":99}`)
	var out [3]*sink.Batch
	var prev *export.Snapshot
	for i, rs := range [][]export.Row{rows, changed, changed} {
		snap := export.NewSnapshot(append([]export.Row(nil), rs...))
		out[i] = &sink.Batch{
			Envelope: export.Envelope{SchemaVersion: export.SchemaVersion, Cluster: cluster, Inventory: "workloads",
				Generation: int64(i + 1), ExportedAt: time.Now(), ItemCount: snap.Len(), Checksum: snap.Checksum, Rows: snap.Rows},
			Diff: export.Compute(prev, snap),
		}
		if prev != nil {
			out[i].PreviousChecksum = prev.Checksum
		}
		prev = snap
	}
	return out
}

func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

func peakRSSMB() float64 {
	raw, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			kb, _ := strconv.ParseFloat(strings.Fields(line)[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// BenchmarkS3100k exports 100k rows to versitygw: all rows, one changed row, and the same
// snapshot again, reporting each export's time and the peak RSS of the process.
func BenchmarkS3100k(b *testing.B) {
	batches := benchBatches(b, "east", 100_000)
	for _, tc := range []struct {
		name string
		ser  v1alpha1.Serialization
		mode v1alpha1.LayoutMode
	}{
		{"document-yaml", v1alpha1.Serialization{Format: "yaml"}, v1alpha1.LayoutDocument},
		{"byNamespace-parquet-zstd", v1alpha1.Serialization{Format: "parquet", Compression: "zstd", PromotedAttributes: []string{"replicas"}}, v1alpha1.LayoutByNamespace},
		{"perResource-json", v1alpha1.Serialization{Format: "json"}, v1alpha1.LayoutPerResource},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				s := newSink(b, "east", newBucket(b), tc.ser, tc.mode, nil)
				resetPeakRSS()
				b.StartTimer()
				var took [3]time.Duration
				for i, batch := range batches {
					start := time.Now()
					if err := s.Export(context.Background(), batch); err != nil {
						b.Fatal(err)
					}
					took[i] = time.Since(start)
				}
				if st := s.LastStats(); st.ManifestWritten {
					b.Fatalf("unchanged export wrote: %+v", st)
				}
				b.ReportMetric(took[0].Seconds(), "s-full")
				b.ReportMetric(took[1].Seconds(), "s-1-row-changed")
				b.ReportMetric(took[2].Seconds(), "s-unchanged")
				b.ReportMetric(peakRSSMB(), "peak-RSS-MB")
			}
		})
	}
}
