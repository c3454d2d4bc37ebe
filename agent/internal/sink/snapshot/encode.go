package snapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"

	"kollect.dev/agent/internal/export"
)

// Document is the shape of YAML and JSON documents: the rows of one path with a header. It
// holds no export time or generation, so unchanged rows render to unchanged bytes. Checksum is
// computed like the snapshot checksum but over this document's rows, so a reader can verify
// each document on its own; for the document layout it equals the snapshot checksum.
type Document struct {
	SchemaVersion string       `json:"schemaVersion"`
	Cluster       string       `json:"cluster"`
	Inventory     string       `json:"inventory"`
	ItemCount     int          `json:"itemCount"`
	Checksum      string       `json:"checksum"`
	Rows          []export.Row `json:"rows"`
}

// DocumentChecksum is "sha256:" + hex(SHA-256(d1 ‖ … ‖ dn)) over the rows' digests, the
// snapshot checksum algorithm of the export contract.
func DocumentChecksum(rows []*export.Row) string {
	h := sha256.New()
	for _, r := range rows {
		d := r.Digest()
		h.Write(d[:])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

func encodeJSON(cluster, inventory, checksum string, rows []*export.Row) []byte {
	var buf bytes.Buffer
	buf.Grow(len(rows) * 256)
	fmt.Fprintf(&buf, "{\n  \"schemaVersion\": %s,\n  \"cluster\": %s,\n  \"inventory\": %s,\n  \"itemCount\": %d,\n  \"checksum\": %q,\n  \"rows\": [",
		jsonString(export.SchemaVersion), jsonString(cluster), jsonString(inventory), len(rows), checksum)
	for i, r := range rows {
		if i > 0 {
			buf.WriteByte(',')
		}
		// One canonical row per line: readable diffs, and each line is a valid NDJSON row.
		buf.WriteString("\n    ")
		buf.Write(r.CanonicalJSON())
	}
	if len(rows) > 0 {
		buf.WriteString("\n  ")
	}
	buf.WriteString("]\n}\n")
	return buf.Bytes()
}

func jsonString(s string) string {
	raw, _ := json.Marshal(s) // a string always encodes
	return string(raw)
}

func encodeNDJSON(rows []*export.Row) []byte {
	var buf bytes.Buffer
	buf.Grow(len(rows) * 256)
	for _, r := range rows {
		buf.Write(r.CanonicalJSON())
		buf.WriteByte('\n')
	}
	return buf.Bytes()
}

// attributeValues decodes a row's attributes with numbers as int64 where they are integers,
// float64 otherwise, so YAML and typed columns show numbers, not strings.
func attributeValues(r *export.Row) (map[string]any, error) {
	m, err := r.AttributeMap()
	if err != nil {
		return nil, err
	}
	for k, v := range m {
		m[k] = plainNumbers(v)
	}
	return m, nil
}

func plainNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return i
		}
		if f, err := strconv.ParseFloat(string(x), 64); err == nil {
			return f
		}
		return string(x)
	case map[string]any:
		for k, e := range x {
			x[k] = plainNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = plainNumbers(e)
		}
	}
	return v
}
