package snapshot

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

func row(t *testing.T, ns, kind, name string, attrs map[string]any) export.Row {
	t.Helper()
	raw, err := export.EncodeAttributes(attrs)
	if err != nil {
		t.Fatal(err)
	}
	group := "apps"
	if kind == "Pod" || kind == "Node" {
		group = ""
	}
	return export.Row{Origin: &export.Origin{Cluster: "east", Inventory: "workloads", Target: "all", Group: group, Version: "v1", Kind: kind, Profile: "kollect/" + strings.ToLower(kind) + "s", ProfileGeneration: int64(len(name))}, Namespace: ns, Name: name, UID: "uid-" + ns + "-" + name, Attributes: raw}
}

func envelope(rows ...export.Row) *export.Envelope {
	s := export.NewSnapshot(rows)
	return &export.Envelope{SchemaVersion: export.SchemaVersion, Cluster: "east", Inventory: "workloads",
		Generation: 3, ExportedAt: time.Unix(1700000000, 0), ItemCount: s.Len(), Checksum: s.Checksum, Rows: s.Rows}
}

func sampleRows(t *testing.T) []export.Row {
	return []export.Row{
		row(t, "shop", "Deployment", "web", map[string]any{"replicas": 3, "image": "web:1.2", "ready": true, "cpu": 0.5}),
		row(t, "shop", "Deployment", "api", map[string]any{"replicas": 2, "image": "api:7", "ready": false, "labels": map[string]any{"tier": "x"}}),
		row(t, "ops", "Pod", "probe", map[string]any{"image": "busybox", "note": "a,b \"quoted\"\nline"}),
		row(t, "", "Node", "n1", map[string]any{"cpu": 4}),
	}
}

func mustOptions(t *testing.T, format v1alpha1.Format, comp v1alpha1.Compression, mode v1alpha1.LayoutMode, promoted ...string) Options {
	t.Helper()
	o, err := NewOptions(v1alpha1.Serialization{Format: format, Compression: comp, PromotedAttributes: promoted},
		v1alpha1.Layout{Mode: mode}, v1alpha1.FormatYAML, true)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestOptionsRefuseAmbiguousTemplates(t *testing.T) {
	for _, tc := range []struct {
		mode     v1alpha1.LayoutMode
		template string
		comp     v1alpha1.Compression
		allow    bool
	}{
		{v1alpha1.LayoutDocument, "{cluster}/{inventory}/{name}.{ext}", "", true},
		{v1alpha1.LayoutByNamespace, "{cluster}/{inventory}/{kind}.{ext}", "", true},
		{v1alpha1.LayoutPerResource, "{cluster}/{name}.{ext}", "", true},
		{v1alpha1.LayoutPerResource, "{cluster}/{inventory}/{nmae}.{ext}", "", true},
		{v1alpha1.LayoutDocument, "/{cluster}/{inventory}.{ext}", "", true},
		{v1alpha1.LayoutDocument, "", v1alpha1.CompressionGzip, false},
	} {
		_, err := NewOptions(v1alpha1.Serialization{Compression: tc.comp}, v1alpha1.Layout{Mode: tc.mode, PathTemplate: tc.template}, v1alpha1.FormatYAML, tc.allow)
		if err == nil || sink.ClassOf(err) != sink.Terminal {
			t.Errorf("%s %q: want a terminal error, got %v", tc.mode, tc.template, err)
		}
	}
}

func TestLayoutsGroupRowsIntoPaths(t *testing.T) {
	env := envelope(sampleRows(t)...)
	want := map[v1alpha1.LayoutMode][]string{
		v1alpha1.LayoutDocument: {"east/workloads.yaml"},
		v1alpha1.LayoutPerResource: {
			"east/workloads/_cluster/Node/n1.yaml", "east/workloads/ops/Pod/probe.yaml",
			"east/workloads/shop/Deployment/api.yaml", "east/workloads/shop/Deployment/web.yaml",
		},
		v1alpha1.LayoutByNamespace: {"east/workloads/_cluster.yaml", "east/workloads/ops.yaml", "east/workloads/shop.yaml"},
		v1alpha1.LayoutByKind:      {"east/workloads/Deployment.yaml", "east/workloads/Node.yaml", "east/workloads/Pod.yaml"},
	}
	for mode, paths := range want {
		r, err := mustOptions(t, "", "", mode).Render(env)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Paths(100); strings.Join(got, " ") != strings.Join(paths, " ") {
			t.Errorf("%s: paths %v, want %v", mode, got, paths)
		}
		total := 0
		for _, f := range r.Files() {
			total += f.Rows
			if !r.Matcher.Match(f.Path) {
				t.Errorf("%s: matcher does not own %s", mode, f.Path)
			}
		}
		if total != 4 || r.Manifest.ItemCount != 4 || r.ManifestPath != "east/workloads.manifest.json" {
			t.Errorf("%s: %d rows in files, manifest %+v", mode, total, r.Manifest)
		}
		if r.Matcher.Match(r.ManifestPath) || r.Matcher.Match("west/workloads/shop.yaml") || r.Matcher.Match("east/other/shop.yaml") {
			t.Errorf("%s: matcher owns a path of another cluster or inventory, or the manifest", mode)
		}
	}
}

func TestRenderIsDeterministicAndIgnoresExportTime(t *testing.T) {
	for _, format := range []v1alpha1.Format{"yaml", "json", "ndjson", "csv", "parquet"} {
		for _, comp := range []v1alpha1.Compression{"none", "gzip", "zstd"} {
			o := mustOptions(t, format, comp, v1alpha1.LayoutByNamespace, "replicas", "image")
			a, err := o.Render(envelope(sampleRows(t)...))
			if err != nil {
				t.Fatalf("%s/%s: %v", format, comp, err)
			}
			env := envelope(sampleRows(t)...)
			env.ExportedAt, env.Generation = time.Now(), 99
			b, err := o.Render(env)
			if err != nil {
				t.Fatal(err)
			}
			for i := range a.Files() {
				if !bytes.Equal(a.Files()[i].Data, b.Files()[i].Data) {
					t.Errorf("%s/%s: %s differs between two renders", format, comp, a.Files()[i].Path)
				}
			}
		}
	}
}

// TestOnlyTheManifestNamesTheWriter: documents of every format render the same bytes whatever
// agent writes them; the manifest names the writer, and Current ignores it, so an upgraded
// agent rewrites nothing until it confirms.
func TestOnlyTheManifestNamesTheWriter(t *testing.T) {
	v1 := export.Writer{Version: "v0.1.0", Instance: "kollect-system@4f9c"}
	v2 := export.Writer{Version: "v0.2.0", Instance: v1.Instance}
	for _, format := range []v1alpha1.Format{"yaml", "json", "ndjson", "csv", "parquet"} {
		o := mustOptions(t, format, "none", v1alpha1.LayoutByNamespace, "replicas")
		env := envelope(sampleRows(t)...)
		env.Writer = v1
		a, err := o.Render(env)
		if err != nil {
			t.Fatal(err)
		}
		env.Writer = v2
		b, err := o.Render(env)
		if err != nil {
			t.Fatal(err)
		}
		for i, f := range a.Files() {
			if !bytes.Equal(f.Data, b.Files()[i].Data) {
				t.Errorf("%s: %s differs between writers", format, f.Path)
			}
			if bytes.Contains(f.Data, []byte(v1.Instance)) {
				t.Errorf("%s: %s names the writer", format, f.Path)
			}
		}
		m, err := ParseManifest(a.Manifest.Marshal())
		if err != nil {
			t.Fatal(err)
		}
		if m.Writer != v1 {
			t.Errorf("%s: the manifest names %+v, want %+v", format, m.Writer, v1)
		}
		if !o.Current(m, env.Checksum) {
			t.Errorf("%s: a manifest of another writer is not current", format)
		}
	}
}

func TestYAMLAndJSONDocumentsHoldTheRows(t *testing.T) {
	env := envelope(sampleRows(t)...)
	for _, format := range []v1alpha1.Format{"yaml", "json"} {
		r, err := mustOptions(t, format, "", v1alpha1.LayoutDocument).Render(env)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			SchemaVersion string           `yaml:"schemaVersion"`
			Checksum      string           `yaml:"checksum"`
			ItemCount     int              `yaml:"itemCount"`
			Rows          []map[string]any `yaml:"rows"`
		}
		if err := yaml.Unmarshal(r.Files()[0].Data, &doc); err != nil { // JSON is YAML
			t.Fatalf("%s: %v", format, err)
		}
		if doc.SchemaVersion != export.SchemaVersion || doc.Checksum != env.Checksum || doc.ItemCount != 4 || len(doc.Rows) != 4 {
			t.Fatalf("%s: header %+v", format, doc)
		}
		for i, got := range doc.Rows {
			want := env.Rows[i]
			attrs, _ := want.AttributeMap()
			if got["name"] != want.Name || got["namespace"] != want.Namespace || got["uid"] != want.UID {
				t.Errorf("%s row %d: %v", format, i, got)
			}
			gotAttrs, _ := json.Marshal(got["attributes"])
			wantAttrs, _ := json.Marshal(attrs)
			if string(gotAttrs) != string(wantAttrs) {
				t.Errorf("%s row %d attributes %s, want %s", format, i, gotAttrs, wantAttrs)
			}
		}
	}
	r, _ := mustOptions(t, "yaml", "", v1alpha1.LayoutDocument).Render(env)
	text := string(r.Files()[0].Data)
	if !strings.Contains(text, "    replicas: 3\n") || strings.Index(text, "cluster: east") > strings.Index(text, "rows:") {
		t.Errorf("YAML is not in the stable, readable order:\n%s", text)
	}
}

func TestNDJSONLinesAreCanonicalRows(t *testing.T) {
	env := envelope(sampleRows(t)...)
	r, err := mustOptions(t, "ndjson", "zstd", v1alpha1.LayoutDocument).Render(env)
	if err != nil {
		t.Fatal(err)
	}
	if r.Files()[0].Path != "east/workloads.ndjson.zst" {
		t.Fatalf("path %s", r.Files()[0].Path)
	}
	raw, err := Decompress(v1alpha1.CompressionZstd, r.Files()[0].Data)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	for i := range env.Rows {
		if lines[i] != string(env.Rows[i].CanonicalJSON()) {
			t.Errorf("line %d: %s", i, lines[i])
		}
	}
}

func TestCSVReadsBackWithEncodingCSV(t *testing.T) {
	env := envelope(sampleRows(t)...)
	r, err := mustOptions(t, "csv", "gzip", v1alpha1.LayoutDocument, "replicas").Render(env)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := Decompress(v1alpha1.CompressionGzip, r.Files()[0].Data)
	if err != nil {
		t.Fatal(err)
	}
	records, err := csv.NewReader(bytes.NewReader(raw)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	header := strings.Join(records[0], ",")
	if header != "cluster,inventory,target,group,version,kind,namespace,name,uid,profile,profileGeneration,replicas,cpu,image,labels,note,ready" {
		t.Fatalf("header %s", header)
	}
	if len(records) != 5 {
		t.Fatalf("%d records", len(records))
	}
	for i, rec := range records[1:] {
		want := env.Rows[i]
		attrs, _ := want.AttributeMap()
		if strings.Join(rec[:9], "|") != strings.Join(identityValues(&want), "|") {
			t.Errorf("row %d identity %v", i, rec[:9])
		}
		if rec[9] != want.Profile || rec[10] != strconv.FormatInt(want.ProfileGeneration, 10) {
			t.Errorf("row %d provenance %v, want %s@%d", i, rec[9:11], want.Profile, want.ProfileGeneration)
		}
		for j, col := range records[0][11:] {
			cell, _ := csvCell(attrs[col])
			if rec[11+j] != cell {
				t.Errorf("row %d %s = %q, want %q", i, col, rec[11+j], cell)
			}
		}
	}
	if records[1][records0Index(records[0], "note")] != "a,b \"quoted\"\nline" && records[2][records0Index(records[0], "note")] != "a,b \"quoted\"\nline" {
		t.Errorf("a cell with separators, quotes and a newline did not survive")
	}
}

func records0Index(header []string, col string) int {
	for i, h := range header {
		if h == col {
			return i
		}
	}
	panic(fmt.Sprintf("no column %s", col))
}

func TestPlanWritesOnlyChangesAndPrunesOnlyOwnedFiles(t *testing.T) {
	o := mustOptions(t, "json", "", v1alpha1.LayoutPerResource)
	before, err := o.Render(envelope(sampleRows(t)...))
	if err != nil {
		t.Fatal(err)
	}
	recorded := before.Manifest.Hashes()
	listed := []string{"west/workloads/shop/Deployment/web.json", "east/workloads.manifest.json", // another cluster's, the manifest
		"east/workloads/old/Pod/x.json"} // a leftover of a crashed export

	rows := sampleRows(t)
	rows[0] = row(t, "shop", "Deployment", "web", map[string]any{"replicas": 4, "image": "web:1.3", "ready": true, "cpu": 0.5})
	rows = rows[:3] // the node is gone
	after, err := o.Render(envelope(rows...))
	if err != nil {
		t.Fatal(err)
	}
	plan := after.Plan(recorded, listed)
	if len(plan.Write) != 1 || plan.Write[0].Path != "east/workloads/shop/Deployment/web.json" || plan.Unchanged != 2 {
		t.Errorf("writes %v, unchanged %d", plan.Write, plan.Unchanged)
	}
	if strings.Join(plan.Delete, " ") != "east/workloads/_cluster/Node/n1.json east/workloads/old/Pod/x.json" {
		t.Errorf("deletes %v", plan.Delete)
	}
}

func TestMatcherPrefixForListing(t *testing.T) {
	for tmpl, want := range map[string]string{
		"{cluster}/{inventory}.{ext}":                         "east/workloads.yaml",
		"{cluster}/{inventory}/{namespace}/{name}.{ext}":      "east/workloads/",
		"inv-{inventory}/{cluster}-{namespace}/{name}.{ext}":  "inv-workloads/",
		"{cluster}-{kind}-{inventory}.{ext}":                  "",
		"snapshots/{cluster}/{inventory}/{kind}/{name}.{ext}": "snapshots/east/workloads/",
	} {
		o, err := NewOptions(v1alpha1.Serialization{}, v1alpha1.Layout{Mode: v1alpha1.LayoutPerResource, PathTemplate: tmpl}, v1alpha1.FormatYAML, false)
		if err != nil {
			t.Fatal(err)
		}
		m := o.Matcher("east", "workloads")
		if m.Prefix != want {
			t.Errorf("%s: prefix %q, want %q", tmpl, m.Prefix, want)
		}
		p := o.Path("east", "workloads", &sampleRows(t)[0])
		if !m.Match(p) || !strings.HasPrefix(p, m.Prefix) {
			t.Errorf("%s: %s not matched under %q", tmpl, p, m.Prefix)
		}
	}
}

func TestRenderChangedMatchesFullRender(t *testing.T) {
	for _, mode := range []v1alpha1.LayoutMode{v1alpha1.LayoutDocument, v1alpha1.LayoutPerResource, v1alpha1.LayoutByNamespace} {
		o := mustOptions(t, "yaml", "", mode)
		before := export.NewSnapshot(sampleRows(t))
		rows := sampleRows(t)
		rows[0] = row(t, "shop", "Deployment", "web", map[string]any{"replicas": 9})
		rows = append(rows[:2], row(t, "new", "Pod", "x", map[string]any{}))[:3] // ops/probe and the node go, new/x comes
		after := export.NewSnapshot(rows)
		d := export.Compute(before, after)
		env := &export.Envelope{Cluster: "east", Inventory: "workloads", Checksum: after.Checksum, Rows: after.Rows}
		full, err := o.Render(env)
		if err != nil {
			t.Fatal(err)
		}
		prev, _ := o.Render(&export.Envelope{Cluster: "east", Inventory: "workloads", Checksum: before.Checksum, Rows: before.Rows})
		part, err := o.RenderChanged(env, &d)
		if err != nil {
			t.Fatal(err)
		}
		// Applying the partial render to the previous files must give the full render.
		files := map[string]string{}
		for _, f := range prev.Files() {
			files[f.Path] = f.SHA256
		}
		for _, f := range part.Files {
			files[f.Path] = f.SHA256
		}
		for _, p := range part.Delete {
			delete(files, p)
		}
		want := map[string]string{}
		for _, f := range full.Files() {
			want[f.Path] = f.SHA256
		}
		if fmt.Sprint(files) != fmt.Sprint(want) {
			t.Errorf("%s: partial render gives %v, full render %v", mode, files, want)
		}
		// Patch builds the same manifest as the full render, and a plan of only the changes.
		patched, plan, err := o.Patch(&prev.Manifest, env, &d)
		if err != nil {
			t.Fatal(err)
		}
		got := patched.Manifest
		got.Files = append([]File(nil), got.Files...)
		for i := range got.Files {
			got.Files[i].Data = nil
		}
		wantManifest := full.Manifest
		wantManifest.Files = append([]File(nil), wantManifest.Files...)
		for i := range wantManifest.Files {
			wantManifest.Files[i].Data = nil
		}
		if string(got.Marshal()) != string(wantManifest.Marshal()) {
			t.Errorf("%s: patched manifest\n%s\nwant\n%s", mode, got.Marshal(), wantManifest.Marshal())
		}
		fullPlan := full.Plan(prev.Manifest.Hashes(), nil)
		if len(plan.Write) != len(fullPlan.Write) || fmt.Sprint(plan.Delete) != fmt.Sprint(fullPlan.Delete) {
			t.Errorf("%s: patch plan %d writes %v deletes, full plan %d writes %v deletes", mode, len(plan.Write), plan.Delete, len(fullPlan.Write), fullPlan.Delete)
		}
	}
}
