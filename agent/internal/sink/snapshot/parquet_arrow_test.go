package snapshot

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	v1alpha1 "kollect.dev/api/v1alpha1"
)

// TestParquetReadsBackWithArrow reads the Parquet documents with Apache Arrow's Parquet
// implementation, a reader written independently of the parquet-go writer, and compares every
// cell with the rows, for each compression.
func TestParquetReadsBackWithArrow(t *testing.T) {
	env := envelope(sampleRows(t)...)
	for _, comp := range []v1alpha1.Compression{"none", "gzip", "zstd"} {
		r, err := mustOptions(t, "parquet", comp, v1alpha1.LayoutDocument, "replicas", "cpu", "ready", "image").Render(env)
		if err != nil {
			t.Fatal(err)
		}
		table, err := pqarrow.ReadTable(context.Background(), bytes.NewReader(r.Files()[0].Data), nil, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
		if err != nil {
			t.Fatalf("%s: arrow cannot read the file: %v", comp, err)
		}
		if table.NumRows() != int64(len(env.Rows)) {
			t.Fatalf("%s: %d rows", comp, table.NumRows())
		}
		cells := map[string][]any{}
		types := map[string]arrow.DataType{}
		for i := 0; i < int(table.NumCols()); i++ {
			col := table.Column(i)
			types[col.Name()] = col.DataType()
			for _, chunk := range col.Data().Chunks() {
				for j := 0; j < chunk.Len(); j++ {
					cells[col.Name()] = append(cells[col.Name()], cell(chunk, j))
				}
			}
		}
		for c, want := range map[string]arrow.Type{"cluster": arrow.STRING, "uid": arrow.STRING, "replicas": arrow.INT64,
			"cpu": arrow.FLOAT64, "ready": arrow.BOOL, "image": arrow.STRING, "profile": arrow.STRING, "profileGeneration": arrow.INT64} {
			if types[c] == nil || types[c].ID() != want {
				t.Errorf("%s: column %s is %v, want %v", comp, c, types[c], want)
			}
		}
		for i, row := range env.Rows {
			for j, c := range IdentityColumns {
				if cells[c][i] != identityValues(&row)[j] {
					t.Errorf("%s row %d: %s = %v", comp, i, c, cells[c][i])
				}
			}
			if cells["profile"][i] != row.Profile || cells["profileGeneration"][i] != row.ProfileGeneration {
				t.Errorf("%s row %d: provenance %v@%v, want %s@%d", comp, i, cells["profile"][i], cells["profileGeneration"][i], row.Profile, row.ProfileGeneration)
			}
			if fmt.Sprint(cells["attributes"][i]) != string(row.Attributes) {
				t.Errorf("%s row %d: attributes %v, want %s", comp, i, cells["attributes"][i], row.Attributes)
			}
			attrs, _ := row.AttributeMap()
			for _, c := range []string{"replicas", "cpu", "ready", "image"} {
				want := attrs[c]
				if n, ok := want.(json.Number); ok {
					if c == "replicas" {
						want, _ = n.Int64()
					} else {
						want, _ = n.Float64()
					}
				}
				if cells[c][i] != want {
					t.Errorf("%s row %d: %s = %#v, want %#v", comp, i, c, cells[c][i], want)
				}
			}
		}
	}
}

// cell returns one value of an Arrow array as a Go value, nil for a null.
func cell(a arrow.Array, i int) any {
	if a.IsNull(i) {
		return nil
	}
	switch x := a.(type) {
	case *array.String:
		return x.Value(i)
	case *array.Binary:
		return string(x.Value(i))
	case *array.Int64:
		return x.Value(i)
	case *array.Float64:
		return x.Value(i)
	case *array.Boolean:
		return x.Value(i)
	case array.ExtensionArray:
		return cell(x.Storage(), i)
	default:
		return fmt.Sprintf("unexpected %T", a)
	}
}
