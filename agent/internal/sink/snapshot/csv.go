package snapshot

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"

	"kollect.dev/agent/internal/export"
)

// IdentityColumns lead every CSV and Parquet document, in this order.
var IdentityColumns = []string{"cluster", "inventory", "target", "group", "version", "kind", "namespace", "name", "uid"}

// ProvenanceColumns follow them: the profile and its generation that produced the row. In
// Parquet the generation is an int64, everywhere else it is written in decimal.
var ProvenanceColumns = []string{"profile", "profileGeneration"}

func identityValues(r *export.Row) []string {
	return []string{r.Cluster, r.Inventory, r.Target, r.Group, r.Version, r.Kind, r.Namespace, r.Name, r.UID}
}

// leadingColumns are the columns before the attributes in CSV documents.
var leadingColumns = append(append([]string{}, IdentityColumns...), ProvenanceColumns...)

// attributeColumns is the promoted attributes in their configured order, then every other
// attribute key found in rows, sorted: a column per attribute, stable for stable data.
func attributeColumns(promoted []string, attrs []map[string]any) []string {
	seen := map[string]bool{}
	cols := append([]string{}, promoted...)
	for _, p := range promoted {
		seen[p] = true
	}
	var rest []string
	for _, m := range attrs {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				rest = append(rest, k)
			}
		}
	}
	sort.Strings(rest)
	return append(cols, rest...)
}

// csvCell renders one attribute value: strings as they are, numbers and booleans in JSON
// notation, lists and objects as canonical JSON, a missing or null value as an empty cell.
func csvCell(v any) (string, error) {
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case json.Number:
		return string(x), nil
	default:
		raw, err := json.Marshal(x) // maps encode with sorted keys
		if err != nil {
			return "", err
		}
		return string(raw), nil
	}
}

func encodeCSV(promoted []string, rows []*export.Row) ([]byte, error) {
	attrs := make([]map[string]any, len(rows))
	for i, r := range rows {
		m, err := r.AttributeMap()
		if err != nil {
			return nil, err
		}
		attrs[i] = m
	}
	cols := attributeColumns(promoted, attrs)
	var buf bytes.Buffer
	buf.Grow(len(rows) * 200)
	w := csv.NewWriter(&buf)
	if err := w.Write(append(append([]string{}, leadingColumns...), cols...)); err != nil {
		return nil, err
	}
	record := make([]string, len(leadingColumns)+len(cols))
	for i, r := range rows {
		copy(record, identityValues(r))
		record[len(IdentityColumns)] = r.Profile
		record[len(IdentityColumns)+1] = strconv.FormatInt(r.ProfileGeneration, 10)
		for j, c := range cols {
			cell, err := csvCell(attrs[i][c])
			if err != nil {
				return nil, fmt.Errorf("attribute %s of %s: %w", c, r.Key(), err)
			}
			record[len(leadingColumns)+j] = cell
		}
		if err := w.Write(record); err != nil {
			return nil, err
		}
	}
	w.Flush()
	return buf.Bytes(), w.Error()
}
