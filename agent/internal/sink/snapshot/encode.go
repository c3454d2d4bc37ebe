package snapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"

	"go.yaml.in/yaml/v3"

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

func encodeJSON(cluster, inventory string, rows []*export.Row) []byte {
	var buf bytes.Buffer
	buf.Grow(len(rows) * 256)
	fmt.Fprintf(&buf, "{\n  \"schemaVersion\": %s,\n  \"cluster\": %s,\n  \"inventory\": %s,\n  \"itemCount\": %d,\n  \"checksum\": %q,\n  \"rows\": [",
		jsonString(export.SchemaVersion), jsonString(cluster), jsonString(inventory), len(rows), DocumentChecksum(rows))
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

// yamlRow fixes the key order of a row in YAML: identity first, attributes (sorted by the
// encoder) last.
type yamlRow struct {
	Cluster    string         `yaml:"cluster"`
	Inventory  string         `yaml:"inventory"`
	Target     string         `yaml:"target"`
	Group      string         `yaml:"group"`
	Version    string         `yaml:"version"`
	Kind       string         `yaml:"kind"`
	Namespace  string         `yaml:"namespace"`
	Name       string         `yaml:"name"`
	UID        string         `yaml:"uid"`
	Attributes map[string]any `yaml:"attributes"`
}

type yamlDocument struct {
	SchemaVersion string    `yaml:"schemaVersion"`
	Cluster       string    `yaml:"cluster"`
	Inventory     string    `yaml:"inventory"`
	ItemCount     int       `yaml:"itemCount"`
	Checksum      string    `yaml:"checksum"`
	Rows          []yamlRow `yaml:"rows"`
}

func encodeYAML(cluster, inventory string, rows []*export.Row) ([]byte, error) {
	doc := yamlDocument{
		SchemaVersion: export.SchemaVersion, Cluster: cluster, Inventory: inventory,
		ItemCount: len(rows), Checksum: DocumentChecksum(rows), Rows: make([]yamlRow, len(rows)),
	}
	for i, r := range rows {
		attrs, err := attributeValues(r)
		if err != nil {
			return nil, err
		}
		doc.Rows[i] = yamlRow{r.Cluster, r.Inventory, r.Target, r.Group, r.Version, r.Kind, r.Namespace, r.Name, r.UID, attrs}
	}
	var buf bytes.Buffer
	buf.Grow(len(rows) * 320)
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, fmt.Errorf("encoding YAML: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encoding YAML: %w", err)
	}
	return buf.Bytes(), nil
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
