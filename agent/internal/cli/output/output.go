package output

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	sigsyaml "sigs.k8s.io/yaml"

	"kollect.dev/agent/internal/export"
)

// Formats lists the accepted output formats.
var Formats = []string{"table", "json", "yaml", "ndjson"}

// Write prints rows in format.
func Write(w io.Writer, format string, rows []export.Row) error {
	switch format {
	case "table", "":
		return table(w, rows)
	case "ndjson":
		for i := range rows {
			if _, err := fmt.Fprintf(w, "%s\n", rows[i].CanonicalJSON()); err != nil {
				return err
			}
		}
		return nil
	case "json", "yaml":
		list := make([]json.RawMessage, len(rows))
		for i := range rows {
			list[i] = rows[i].CanonicalJSON()
		}
		js, err := json.MarshalIndent(list, "", "  ")
		if err != nil {
			return fmt.Errorf("encoding rows: %w", err)
		}
		if len(rows) == 0 {
			js = []byte("[]")
		}
		if format == "yaml" {
			if js, err = sigsyaml.JSONToYAML(js); err != nil {
				return fmt.Errorf("encoding rows: %w", err)
			}
			_, err = w.Write(js)
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", js)
		return err
	default:
		return fmt.Errorf("unknown output format %q (want one of %s)", format, strings.Join(Formats, ", "))
	}
}

// table prints identity columns, then one column per attribute name (sorted); the cluster and
// inventory columns appear only when some row has them.
func table(w io.Writer, rows []export.Row) error {
	attrs := map[string]bool{}
	decoded := make([]map[string]any, len(rows))
	showCluster, showInv := false, false
	for i := range rows {
		m, err := rows[i].AttributeMap()
		if err != nil {
			return err
		}
		decoded[i] = m
		for k := range m {
			attrs[k] = true
		}
		showCluster = showCluster || rows[i].Cluster != ""
		showInv = showInv || rows[i].Inventory != ""
	}
	names := make([]string, 0, len(attrs))
	for k := range attrs {
		names = append(names, k)
	}
	sort.Strings(names)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	var head []string
	if showCluster {
		head = append(head, "CLUSTER")
	}
	if showInv {
		head = append(head, "INVENTORY")
	}
	head = append(head, "TARGET", "KIND", "NAMESPACE", "NAME")
	for _, n := range names {
		head = append(head, strings.ToUpper(n))
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for i, r := range rows {
		var cells []string
		if showCluster {
			cells = append(cells, r.Cluster)
		}
		if showInv {
			cells = append(cells, r.Inventory)
		}
		cells = append(cells, r.Target, kind(r), orNone(r.Namespace), r.Name)
		for _, n := range names {
			cells = append(cells, cell(decoded[i], n))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

func kind(r export.Row) string {
	if r.Group == "" {
		return r.Kind
	}
	return r.Kind + "." + r.Group
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

func cell(m map[string]any, k string) string {
	v, ok := m[k]
	if !ok || v == nil {
		return "<none>"
	}
	if s, ok := v.(string); ok {
		return s
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSpace(b.String())
}
