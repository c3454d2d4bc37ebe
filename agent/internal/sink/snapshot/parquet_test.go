package snapshot

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"kollect.dev/agent/internal/export"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

// readColumns reads a Parquet file through the low-level path, independent of the row writer
// that produced it: the footer's schema elements for names and physical types, then each
// column chunk's pages and their values. It returns column name → values in row order.
func readColumns(t *testing.T, data []byte) (map[string][]parquet.Value, map[string]format.Type, *format.FileMetaData) {
	t.Helper()
	f, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	meta := f.Metadata()
	types := map[string]format.Type{}
	var leaves []string
	for _, el := range meta.Schema[1:] { // [0] is the root group
		leaves = append(leaves, el.Name)
		if typ, ok := el.Type.Get(); ok {
			types[el.Name] = typ
		}
	}
	cols := map[string][]parquet.Value{}
	for _, rg := range f.RowGroups() {
		for i, chunk := range rg.ColumnChunks() {
			pages := chunk.Pages()
			for {
				page, err := pages.ReadPage()
				if errors.Is(err, io.EOF) {
					break
				} else if err != nil {
					t.Fatal(err)
				}
				buf := make([]parquet.Value, page.NumValues())
				n, err := page.Values().ReadValues(buf)
				if err != nil && !errors.Is(err, io.EOF) {
					t.Fatal(err)
				}
				for _, v := range buf[:n] {
					cols[leaves[i]] = append(cols[leaves[i]], v.Clone())
				}
			}
			pages.Close()
		}
	}
	return cols, types, meta
}

func TestParquetReadsBackThroughColumnPages(t *testing.T) {
	env := envelope(sampleRows(t)...)
	r, err := mustOptions(t, "parquet", "zstd", v1alpha1.LayoutDocument, "replicas", "cpu", "ready", "labels", "name").Render(env)
	if err != nil {
		t.Fatal(err)
	}
	f := r.Files()[0]
	if f.Path != "east/workloads.parquet" {
		t.Fatalf("path %s", f.Path)
	}
	cols, types, meta := readColumns(t, f.Data)
	if meta.NumRows != 4 {
		t.Fatalf("%d rows", meta.NumRows)
	}
	if codec := meta.RowGroups[0].Columns[0].MetaData.Codec; codec != format.Zstd {
		t.Errorf("codec %v, want zstd pages", codec)
	}
	wantTypes := map[string]format.Type{
		"cluster": format.ByteArray, "uid": format.ByteArray, "attributes": format.ByteArray,
		"profile": format.ByteArray, "profileGeneration": format.Int64,
		"replicas": format.Int64, "cpu": format.Double, "ready": format.Boolean, "labels": format.ByteArray,
		"attr_name": format.ByteArray,
	}
	for c, want := range wantTypes {
		if types[c] != want {
			t.Errorf("column %s type %v, want %v", c, types[c], want)
		}
	}
	for i, want := range env.Rows {
		for j, c := range IdentityColumns {
			if got := string(cols[c][i].ByteArray()); got != identityValues(&want)[j] {
				t.Errorf("row %d %s = %q", i, c, got)
			}
		}
		if p, g := string(cols["profile"][i].ByteArray()), cols["profileGeneration"][i].Int64(); p != want.Profile || g != want.ProfileGeneration {
			t.Errorf("row %d provenance %s@%d, want %s@%d", i, p, g, want.Profile, want.ProfileGeneration)
		}
		if got := string(cols["attributes"][i].ByteArray()); got != string(want.Attributes) {
			t.Errorf("row %d attributes %s, want %s", i, got, want.Attributes)
		}
		attrs, _ := want.AttributeMap()
		checkOptional := func(col string, present bool, check func(parquet.Value) bool) {
			v := cols[col][i]
			if v.IsNull() == present || (present && !check(v)) {
				t.Errorf("row %d %s = %v (attribute %v)", i, col, v, attrs)
			}
		}
		n, hasReplicas := attrs["replicas"].(json.Number)
		checkOptional("replicas", hasReplicas, func(v parquet.Value) bool { i, _ := n.Int64(); return v.Int64() == i })
		c, hasCPU := attrs["cpu"].(json.Number)
		checkOptional("cpu", hasCPU, func(v parquet.Value) bool { f, _ := c.Float64(); return v.Double() == f })
		b, hasReady := attrs["ready"].(bool)
		checkOptional("ready", hasReady, func(v parquet.Value) bool { return v.Boolean() == b })
		_, hasLabels := attrs["labels"]
		checkOptional("labels", hasLabels, func(v parquet.Value) bool { return string(v.ByteArray()) == `{"tier":"x"}` })
		checkOptional("attr_name", false, nil)
	}
}

func TestParquetOfEmptyInventory(t *testing.T) {
	r, err := mustOptions(t, "parquet", "", v1alpha1.LayoutDocument).Render(envelope())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, meta := readColumns(t, r.Files()[0].Data); meta.NumRows != 0 {
		t.Fatalf("%d rows", meta.NumRows)
	}
	_ = export.SchemaVersion
}
