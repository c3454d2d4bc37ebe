package snapshot

import (
	"fmt"
	"strings"

	"kollect.dev/agent/internal/sink"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

// Options is the resolved serialization and layout of a sink.
type Options struct {
	Format      v1alpha1.Format
	Compression v1alpha1.Compression
	// Promoted attributes become typed columns of their own (CSV, Parquet).
	Promoted []string
	Mode     v1alpha1.LayoutMode
	// Template is the path template with defaults applied.
	Template string
}

// DefaultTemplates keep the cluster first so many clusters can share one store, and the
// inventory second so one sink can serve several inventories.
var DefaultTemplates = map[v1alpha1.LayoutMode]string{
	v1alpha1.LayoutDocument:    "{cluster}/{inventory}.{ext}",
	v1alpha1.LayoutPerResource: "{cluster}/{inventory}/{namespace}/{kind}/{name}.{ext}",
	v1alpha1.LayoutByNamespace: "{cluster}/{inventory}/{namespace}.{ext}",
	v1alpha1.LayoutByKind:      "{cluster}/{inventory}/{kind}.{ext}",
}

// placeholders a template may use per layout mode beyond {cluster}, {inventory} and {ext}:
// a placeholder that varies inside one document would make its path ambiguous.
var allowedPerMode = map[v1alpha1.LayoutMode][]string{
	v1alpha1.LayoutDocument:    nil,
	v1alpha1.LayoutPerResource: {"{namespace}", "{kind}", "{name}", "{group}", "{version}", "{target}"},
	v1alpha1.LayoutByNamespace: {"{namespace}"},
	v1alpha1.LayoutByKind:      {"{kind}", "{group}", "{version}"},
}

var rowPlaceholders = []string{"{namespace}", "{kind}", "{name}", "{group}", "{version}", "{target}"}

// NewOptions applies defaults (format defaultFormat, compression none, layout document) and
// validates the combination. Errors are terminal: only a configuration change fixes them.
// Compression is refused when allowCompression is false (git: diffs of compressed files are
// useless, and the API refuses it too).
func NewOptions(ser v1alpha1.Serialization, layout v1alpha1.Layout, defaultFormat v1alpha1.Format, allowCompression bool) (Options, error) {
	o := Options{
		Format:      ser.Format,
		Compression: ser.Compression,
		Promoted:    ser.PromotedAttributes,
		Mode:        layout.Mode,
		Template:    layout.PathTemplate,
	}
	if o.Format == "" {
		o.Format = defaultFormat
	}
	if o.Compression == "" {
		o.Compression = v1alpha1.CompressionNone
	}
	if o.Mode == "" {
		o.Mode = v1alpha1.LayoutDocument
	}
	switch o.Format {
	case v1alpha1.FormatYAML, v1alpha1.FormatJSON, v1alpha1.FormatNDJSON, v1alpha1.FormatCSV, v1alpha1.FormatParquet:
	default:
		return o, sink.Terminalf("unknown serialization format %q", o.Format)
	}
	switch o.Compression {
	case v1alpha1.CompressionNone:
	case v1alpha1.CompressionGzip, v1alpha1.CompressionZstd:
		if !allowCompression {
			return o, sink.Terminalf("compression %s is only supported by object stores", o.Compression)
		}
	default:
		return o, sink.Terminalf("unknown compression %q", o.Compression)
	}
	allowed, ok := allowedPerMode[o.Mode]
	if !ok {
		return o, sink.Terminalf("unknown layout mode %q", o.Mode)
	}
	if o.Template == "" {
		o.Template = DefaultTemplates[o.Mode]
	}
	if err := checkTemplate(o.Template, allowed); err != nil {
		return o, sink.TerminalError(fmt.Errorf("layout %s: %w", o.Mode, err))
	}
	return o, nil
}

func checkTemplate(t string, allowed []string) error {
	for _, must := range []string{"{cluster}", "{inventory}"} {
		if !strings.Contains(t, must) {
			return fmt.Errorf("pathTemplate %q must contain %s", t, must)
		}
	}
	if strings.HasPrefix(t, "/") || strings.HasSuffix(t, "/") || strings.Contains(t, "//") {
		return fmt.Errorf("pathTemplate %q must be a relative file path", t)
	}
	for _, p := range rowPlaceholders {
		if strings.Contains(t, p) && !contains(allowed, p) {
			return fmt.Errorf("pathTemplate %q may not use %s in this layout: it varies inside one document", t, p)
		}
	}
	rest := t
	for _, p := range append(rowPlaceholders, "{cluster}", "{inventory}", "{ext}") {
		rest = strings.ReplaceAll(rest, p, "")
	}
	if strings.ContainsAny(rest, "{}") {
		return fmt.Errorf("pathTemplate %q has an unknown placeholder (known: {cluster} {inventory} {namespace} {kind} {name} {group} {version} {target} {ext})", t)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Ext is the file extension of documents, compression suffix included. Parquet compresses
// its pages itself, so a compressed Parquet file keeps its extension and stays readable.
func (o Options) Ext() string {
	ext := string(o.Format)
	if o.Format == v1alpha1.FormatParquet {
		return ext
	}
	switch o.Compression {
	case v1alpha1.CompressionGzip:
		ext += ".gz"
	case v1alpha1.CompressionZstd:
		ext += ".zst"
	}
	return ext
}

// ContentType is the media type of documents, for object metadata.
func (o Options) ContentType() string {
	if o.Format != v1alpha1.FormatParquet {
		switch o.Compression {
		case v1alpha1.CompressionGzip:
			return "application/gzip"
		case v1alpha1.CompressionZstd:
			return "application/zstd"
		}
	}
	switch o.Format {
	case v1alpha1.FormatYAML:
		return "application/yaml"
	case v1alpha1.FormatJSON:
		return "application/json"
	case v1alpha1.FormatNDJSON:
		return "application/x-ndjson"
	case v1alpha1.FormatCSV:
		return "text/csv"
	default:
		return "application/vnd.apache.parquet"
	}
}
