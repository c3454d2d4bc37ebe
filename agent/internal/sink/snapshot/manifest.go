package snapshot

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"kollect.dev/agent/internal/export"
)

// Manifest describes one complete export of an inventory. Writers store every document first
// and the manifest last; a reader that finds each listed file with the listed hash holds a
// complete snapshot, and one that does not has caught a write in progress (or a torn one).
type Manifest struct {
	SchemaVersion string `json:"schemaVersion"`
	Cluster       string `json:"cluster"`
	Inventory     string `json:"inventory"`
	Generation    int64  `json:"generation"`
	// ExportedAt is when the documents last changed; ConfirmedAt when the agent last
	// confirmed they are still the cluster's current snapshot (an export confirms too), the
	// time a reader measures freshness from. Manifests written before confirmations lack it.
	ExportedAt   time.Time `json:"exportedAt"`
	ConfirmedAt  time.Time `json:"confirmedAt,omitzero"`
	ItemCount    int       `json:"itemCount"`
	Checksum     string    `json:"checksum"`
	Format       string    `json:"format"`
	Compression  string    `json:"compression"`
	Layout       string    `json:"layout"`
	PathTemplate string    `json:"pathTemplate"`
	Promoted     []string  `json:"promotedAttributes,omitempty"`
	// Renderer identifies the rendering code: a new Kollect that renders differently
	// rewrites documents even when the rows did not change.
	Renderer string `json:"renderer"`
	// Writer names the agent of the last export or confirmation (its version and its
	// installation's stable identity). Only the manifest carries it, never a document, and
	// Current ignores it: an agent upgrade rewrites no document, its first confirmation
	// renames the writer. Manifests written before provenance lack it.
	Writer export.Writer `json:"writer,omitzero"`
	// Contender and ContendedAt are the mark another instance of the same cluster name left
	// when the manifest's writer still held the inventory and its export was refused (see
	// sink.WriterCheck): the only write a refused agent makes. Later manifests keep it, so the
	// holder keeps reporting the conflict for the window.
	Contender   export.Writer `json:"contender,omitzero"`
	ContendedAt time.Time     `json:"contendedAt,omitzero"`
	// Coverage is the snapshot's coverage per target, sorted by target: which targets' rows
	// are all of their objects (complete) and which are kept from earlier or removed, and why.
	// It lives here beside the files, never in a document, and changes without them: a
	// coverage change alone rewrites the manifest only. Current ignores it, like Writer.
	// Manifests written before coverage lack it.
	Coverage []export.Coverage `json:"coverage,omitempty"`
	Files    []File            `json:"files"`
}

// RendererVersion changes whenever the bytes rendered for the same rows change.
const RendererVersion = "kollect-snapshot/1"

// Current reports whether m already describes an export of the snapshot with this checksum
// under these options, so nothing needs rendering or writing: rendering is a pure function
// of the rows and the options.
func (o Options) Current(m *Manifest, checksum string) bool {
	return m != nil && m.Checksum == checksum && m.Renderer == RendererVersion && m.Format == string(o.Format) &&
		m.Compression == string(o.Compression) && m.Layout == string(o.Mode) && m.PathTemplate == o.Template &&
		slices.Equal(m.Promoted, o.Promoted)
}

// File is one document: its path relative to the sink's root, the SHA-256 of its stored bytes
// (after compression), its size and how many rows it holds. Data is not serialized.
type File struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
	Size   int    `json:"size"`
	Rows   int    `json:"rows"`
	Data   []byte `json:"-"`
}

// Marshal encodes the manifest, one file per line for readable diffs.
func (m *Manifest) Marshal() []byte {
	raw, _ := json.MarshalIndent(m, "", "  ") // plain strings and numbers always encode
	return append(raw, '\n')
}

// ParseManifest decodes a stored manifest.
func ParseManifest(raw []byte) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("decoding manifest: %w", err)
	}
	return &m, nil
}

// Hashes maps each listed path to its hash.
func (m *Manifest) Hashes() map[string]string {
	if m == nil {
		return map[string]string{}
	}
	out := make(map[string]string, len(m.Files))
	for _, f := range m.Files {
		out[f.Path] = f.SHA256
	}
	return out
}
