package snapshot

import (
	"encoding/json"
	"testing"

	"kollect.dev/agent/internal/export"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

// TestCoveragePath: the coverage file sits where each template puts the inventory, falls back
// to the manifest's place when a row placeholder precedes {inventory}, and is never a path
// the prune matcher owns.
func TestCoveragePath(t *testing.T) {
	for _, tc := range []struct {
		mode     v1alpha1.LayoutMode
		template string
		want     string
	}{
		{v1alpha1.LayoutDocument, "", "east/pods.coverage.json"},
		{v1alpha1.LayoutPerResource, "", "east/pods.coverage.json"},
		{v1alpha1.LayoutByNamespace, "", "east/pods.coverage.json"},
		{v1alpha1.LayoutByKind, "", "east/pods.coverage.json"},
		{v1alpha1.LayoutPerResource, "clusters/{cluster}/{inventory}/{namespace}/{kind}/{name}.{ext}", "clusters/east/pods.coverage.json"},
		{v1alpha1.LayoutDocument, "fleet/{cluster}-{inventory}.{ext}", "fleet/east-pods.coverage.json"},
		{v1alpha1.LayoutByNamespace, "{cluster}/{namespace}/{inventory}.{ext}", "east/pods.coverage.json"},
		{v1alpha1.LayoutPerResource, "{cluster}/{inventory}{name}.json", "east/pods.coverage.json"},
	} {
		o, err := NewOptions(v1alpha1.Serialization{Format: v1alpha1.FormatJSON}, v1alpha1.Layout{Mode: tc.mode, PathTemplate: tc.template}, v1alpha1.FormatYAML, false)
		if err != nil {
			t.Fatal(err)
		}
		got := o.CoveragePath("east", "pods")
		if got != tc.want {
			t.Errorf("%s %q: coverage at %s, want %s", tc.mode, tc.template, got, tc.want)
		}
		if o.Matcher("east", "pods").Match(got) {
			t.Errorf("%s %q: the prune matcher owns the coverage file %s", tc.mode, tc.template, got)
		}
	}
}

// TestCoverageFile: the file holds the envelope's coverage under its JSON names, one target a
// line, and nothing that ticks: envelopes that differ only in time, generation and checksum
// render the same bytes. Without coverage there is no file.
func TestCoverageFile(t *testing.T) {
	o, err := NewOptions(v1alpha1.Serialization{}, v1alpha1.Layout{}, v1alpha1.FormatYAML, false)
	if err != nil {
		t.Fatal(err)
	}
	cov := []export.Coverage{
		{Target: "apps/crons", State: v1alpha1.CoverageForbidden, Rows: 2, Reason: `cronjobs is "forbidden"`},
		{Target: "apps/deploys", State: v1alpha1.CoverageComplete, Rows: 5, ExtractionErrors: 1},
	}
	a, ok := o.CoverageFile(&export.Envelope{Cluster: "east", Inventory: "pods", Generation: 1, Checksum: "sha256:a", Coverage: cov})
	if !ok {
		t.Fatal("no coverage file")
	}
	b, _ := o.CoverageFile(&export.Envelope{Cluster: "east", Inventory: "pods", Generation: 2, Checksum: "sha256:b", Coverage: cov})
	if string(a.Data) != string(b.Data) || a.SHA256 != b.SHA256 {
		t.Fatalf("the coverage file ticks:\n%s\n%s", a.Data, b.Data)
	}
	want := `{"schemaVersion":"` + export.SchemaVersion + `","cluster":"east","inventory":"pods","coverage":[
  {"target":"apps/crons","state":"forbidden","rows":2,"extractionErrors":0,"reason":"cronjobs is \"forbidden\""},
  {"target":"apps/deploys","state":"complete","rows":5,"extractionErrors":1}
]}
`
	if string(a.Data) != want {
		t.Fatalf("coverage file:\n%s\nwant:\n%s", a.Data, want)
	}
	var doc CoverageDocument
	if err := json.Unmarshal(a.Data, &doc); err != nil || len(doc.Coverage) != 2 || doc.Coverage[0] != cov[0] || doc.Cluster != "east" {
		t.Fatalf("decoding the coverage file: %v %+v", err, doc)
	}
	if a.Path != "east/pods.coverage.json" {
		t.Fatalf("path %s", a.Path)
	}
	if _, ok := o.CoverageFile(&export.Envelope{Cluster: "east", Inventory: "pods"}); ok {
		t.Fatal("a coverage file without coverage")
	}
}
