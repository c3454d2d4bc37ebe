package snapshot

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"kollect.dev/agent/internal/export"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

func benchEnvelope(b *testing.B, n int) *export.Envelope {
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
		rows[i] = export.Row{Origin: &export.Origin{Cluster: "east", Inventory: "workloads", Target: "deploys", Group: "apps", Version: "v1", Kind: "Deployment"}, Namespace: fmt.Sprintf("team-%02d", i%100), Name: name, UID: fmt.Sprintf("uid-%06d", i), Attributes: raw}
	}
	s := export.NewSnapshot(rows)
	return &export.Envelope{Cluster: "east", Inventory: "workloads", ExportedAt: time.Now(), ItemCount: n, Checksum: s.Checksum, Rows: s.Rows}
}

// BenchmarkRender100k renders 100k rows in each format and layout that matters for size.
func BenchmarkRender100k(b *testing.B) {
	env := benchEnvelope(b, 100_000)
	for _, tc := range []struct {
		format v1alpha1.Format
		mode   v1alpha1.LayoutMode
	}{{"yaml", "document"}, {"yaml", "perResource"}, {"json", "document"}, {"ndjson", "document"}, {"csv", "document"}, {"parquet", "document"}} {
		b.Run(string(tc.format)+"-"+string(tc.mode), func(b *testing.B) {
			o, err := NewOptions(v1alpha1.Serialization{Format: tc.format}, v1alpha1.Layout{Mode: tc.mode}, "yaml", true)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for range b.N {
				r, err := o.Render(env)
				if err != nil {
					b.Fatal(err)
				}
				size := 0
				for _, f := range r.Files() {
					size += f.Size
				}
				b.ReportMetric(float64(size)/1e6, "MB")
			}
		})
	}
}
