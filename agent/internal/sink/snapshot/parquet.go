package snapshot

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
	pqgzip "github.com/parquet-go/parquet-go/compress/gzip"
	pqzstd "github.com/parquet-go/parquet-go/compress/zstd"

	"kollect.dev/agent/internal/export"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

// AttributesColumn holds every attribute of a row as canonical JSON in Parquet documents.
const AttributesColumn = "attributes"

// PromotedColumn is the Parquet column name of a promoted attribute: its own name unless that
// clashes with an identity column or the attributes column.
func PromotedColumn(attr string) string {
	if attr == AttributesColumn || contains(IdentityColumns, attr) || contains(ProvenanceColumns, attr) {
		return "attr_" + attr
	}
	return attr
}

// promotedKind is the physical type inferred for a promoted attribute from the values it takes
// in one document: the narrowest of int64, double, boolean that fits every value, else string
// (lists and objects as canonical JSON).
type promotedKind int

const (
	kindNull promotedKind = iota
	kindInt
	kindDouble
	kindBool
	kindString
)

func kindOf(v any) promotedKind {
	switch x := v.(type) {
	case nil:
		return kindNull
	case bool:
		return kindBool
	case json.Number:
		if _, err := x.Int64(); err == nil {
			return kindInt
		}
		return kindDouble
	default:
		return kindString
	}
}

func widen(a, b promotedKind) promotedKind {
	switch {
	case a == kindNull:
		return b
	case b == kindNull || a == b:
		return a
	case (a == kindInt && b == kindDouble) || (a == kindDouble && b == kindInt):
		return kindDouble
	default:
		return kindString
	}
}

func parquetCodec(c v1alpha1.Compression) compress.Codec {
	switch c {
	case v1alpha1.CompressionGzip:
		return &pqgzip.Codec{}
	case v1alpha1.CompressionZstd:
		// One encoder goroutine: output must not depend on scheduling, and cores are shared.
		return &pqzstd.Codec{Concurrency: 1}
	default:
		return nil
	}
}

// encodeParquet writes typed identity columns (required strings), the provenance (profile, a
// string, and profileGeneration, an int64), the attributes as a JSON column, and one optional
// typed column per promoted attribute.
func encodeParquet(o Options, rows []*export.Row) ([]byte, error) {
	attrs := make([]map[string]any, len(rows))
	kinds := make([]promotedKind, len(o.Promoted))
	for i, r := range rows {
		m, err := r.AttributeMap()
		if err != nil {
			return nil, err
		}
		attrs[i] = m
		for j, p := range o.Promoted {
			kinds[j] = widen(kinds[j], kindOf(m[p]))
		}
	}
	group := parquet.Group{AttributesColumn: parquet.JSON()}
	for _, c := range IdentityColumns {
		group[c] = parquet.String()
	}
	group[ProvenanceColumns[0]] = parquet.String()
	group[ProvenanceColumns[1]] = parquet.Int(64)
	for j, p := range o.Promoted {
		var n parquet.Node
		switch kinds[j] {
		case kindInt:
			n = parquet.Int(64)
		case kindDouble:
			n = parquet.Leaf(parquet.DoubleType)
		case kindBool:
			n = parquet.Leaf(parquet.BooleanType)
		default: // strings, and attributes that are null in every row of this document
			n = parquet.String()
		}
		group[PromotedColumn(p)] = parquet.Optional(n)
	}
	schema := parquet.NewSchema("kollect_row", group)
	index := map[string]int{}
	for i, path := range schema.Columns() {
		index[path[0]] = i
	}

	var buf bytes.Buffer
	opts := []parquet.WriterOption{schema, parquet.CreatedBy("kollect", export.SchemaVersion, "")}
	if codec := parquetCodec(o.Compression); codec != nil {
		opts = append(opts, parquet.Compression(codec))
	}
	w := parquet.NewWriter(&buf, opts...)
	batch := make([]parquet.Row, 0, 1024)
	flush := func() error {
		if _, err := w.WriteRows(batch); err != nil {
			return fmt.Errorf("writing Parquet rows: %w", err)
		}
		batch = batch[:0]
		return nil
	}
	for i, r := range rows {
		row := make(parquet.Row, len(index))
		for j, v := range identityValues(r) {
			c := index[IdentityColumns[j]]
			row[c] = parquet.ByteArrayValue([]byte(v)).Level(0, 0, c)
		}
		c := index[ProvenanceColumns[0]]
		row[c] = parquet.ByteArrayValue([]byte(r.Profile)).Level(0, 0, c)
		c = index[ProvenanceColumns[1]]
		row[c] = parquet.Int64Value(r.ProfileGeneration).Level(0, 0, c)
		c = index[AttributesColumn]
		attrJSON := []byte(r.Attributes)
		if len(attrJSON) == 0 {
			attrJSON = []byte("{}")
		}
		row[c] = parquet.ByteArrayValue(attrJSON).Level(0, 0, c)
		for j, p := range o.Promoted {
			c := index[PromotedColumn(p)]
			v, err := promotedValue(kinds[j], attrs[i][p])
			if err != nil {
				return nil, fmt.Errorf("attribute %s of %s: %w", p, r.Key(), err)
			}
			if v.IsNull() {
				row[c] = v.Level(0, 0, c)
			} else {
				row[c] = v.Level(0, 1, c)
			}
		}
		batch = append(batch, row)
		if len(batch) == cap(batch) {
			if err := flush(); err != nil {
				return nil, err
			}
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("closing Parquet writer: %w", err)
	}
	return buf.Bytes(), nil
}

func promotedValue(k promotedKind, v any) (parquet.Value, error) {
	if v == nil {
		return parquet.NullValue(), nil
	}
	switch k {
	case kindInt:
		i, err := v.(json.Number).Int64()
		return parquet.Int64Value(i), err
	case kindDouble:
		f, err := v.(json.Number).Float64()
		return parquet.DoubleValue(f), err
	case kindBool:
		return parquet.BooleanValue(v.(bool)), nil
	default:
		s, err := csvCell(v)
		return parquet.ByteArrayValue([]byte(s)), err
	}
}
