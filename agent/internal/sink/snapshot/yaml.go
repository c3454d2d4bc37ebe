package snapshot

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"kollect.dev/agent/internal/export"
)

// encodeYAML writes the document as block YAML with a fixed key order: header, then each row
// with its identity first and its attributes (sorted) last. It is emitted directly rather
// than through a generic YAML encoder, which is an order of magnitude slower and builds a
// node tree per row: 100k-row documents must stay cheap. Strings that a YAML reader could
// take for anything else are written as JSON strings, which are valid YAML double-quoted
// scalars, so every value reads back exactly.
func encodeYAML(cluster, inventory, checksum string, rows []*export.Row) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(len(rows)*320 + 200)
	field(&buf, "", "schemaVersion", export.SchemaVersion)
	field(&buf, "", "cluster", cluster)
	field(&buf, "", "inventory", inventory)
	fmt.Fprintf(&buf, "itemCount: %d\n", len(rows))
	field(&buf, "", "checksum", checksum)
	if len(rows) == 0 {
		buf.WriteString("rows: []\n")
		return buf.Bytes(), nil
	}
	buf.WriteString("rows:\n")
	for _, r := range rows {
		buf.WriteString("- ")
		field(&buf, "", "cluster", r.Cluster)
		for _, kv := range [...][2]string{
			{"inventory", r.Inventory}, {"target", r.Target}, {"group", r.Group}, {"version", r.Version},
			{"kind", r.Kind}, {"namespace", r.Namespace}, {"name", r.Name}, {"uid", r.UID},
		} {
			field(&buf, "  ", kv[0], kv[1])
		}
		buf.WriteString("  attributes:")
		if err := yamlAttributes(&buf, r.Attributes); err != nil {
			// Not the canonical form this fast path reads: take the general path.
			attrs, err := r.AttributeMap()
			if err != nil {
				return nil, err
			}
			if err := yamlValue(&buf, "    ", attrs); err != nil {
				return nil, fmt.Errorf("attributes of %s: %w", r.Key(), err)
			}
		}
	}
	return buf.Bytes(), nil
}

func field(buf *bytes.Buffer, indent, key, value string) {
	buf.WriteString(indent)
	buf.WriteString(key)
	buf.WriteString(": ")
	yamlString(buf, value)
	buf.WriteByte('\n')
}

// yamlValue writes v after a "key:" already written: scalars on the same line, non-empty
// maps as indented blocks, lists as block sequences whose complex items are written in flow
// style (canonical JSON, which YAML reads as is).
func yamlValue(buf *bytes.Buffer, indent string, v any) error {
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 0 {
			buf.WriteString(" {}\n")
			return nil
		}
		buf.WriteByte('\n')
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			buf.WriteString(indent)
			yamlString(buf, k)
			buf.WriteByte(':')
			if err := yamlValue(buf, indent+"  ", x[k]); err != nil {
				return err
			}
		}
	case []any:
		if len(x) == 0 {
			buf.WriteString(" []\n")
			return nil
		}
		buf.WriteByte('\n')
		for _, e := range x {
			buf.WriteString(indent)
			buf.WriteString("-")
			switch e.(type) {
			case map[string]any, []any:
				raw, err := json.Marshal(e)
				if err != nil {
					return err
				}
				buf.WriteByte(' ')
				buf.Write(raw)
				buf.WriteByte('\n')
			default:
				if err := yamlValue(buf, indent+"  ", e); err != nil {
					return err
				}
			}
		}
	default:
		buf.WriteByte(' ')
		if err := yamlScalar(buf, x); err != nil {
			return err
		}
		buf.WriteByte('\n')
	}
	return nil
}

func yamlScalar(buf *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case nil:
		buf.WriteString("null")
	case bool:
		if x {
			buf.WriteString("true")
		} else {
			buf.WriteString("false")
		}
	case json.Number:
		buf.WriteString(string(x))
	case string:
		yamlString(buf, x)
	default:
		return fmt.Errorf("unexpected attribute value %T", v)
	}
	return nil
}

// yamlString writes s plain when no YAML reader can mistake it (no indicator, no number,
// boolean or null look-alike, no ": " or " #"), else as a JSON string.
func yamlString(buf *bytes.Buffer, s string) {
	if plainSafe(s) {
		buf.WriteString(s)
		return
	}
	raw, _ := json.Marshal(s) // a string always encodes
	buf.Write(raw)
}

func plainSafe(s string) bool {
	if s == "" || len(s) > 200 {
		return false
	}
	c := s[0]
	if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == '/') {
		return false // digits, signs and dots may be numbers; other characters are indicators
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '_' || c == '-' || c == '.' || c == '/' || c == '@' || c == '+':
		case c == ':' && i+1 < len(s) && s[i+1] != ' ':
		default:
			return false
		}
	}
	switch strings.ToLower(s) {
	case "true", "false", "yes", "no", "on", "off", "y", "n", "null":
		return false
	}
	return true
}
