package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

// Rendered is the full content of one export: every document with its bytes and hash, the
// manifest describing them, and the matcher of the files this cluster and inventory own.
type Rendered struct {
	Manifest     Manifest
	ManifestPath string
	Matcher      *Matcher
}

// Files are the documents, sorted by path.
func (r *Rendered) Files() []File { return r.Manifest.Files }

// Render serializes an envelope's rows into documents. It is pure: the same rows give the
// same bytes, whatever the time or generation (only the manifest carries those).
func (o Options) Render(env *export.Envelope) (*Rendered, error) {
	groups := map[string][]*export.Row{}
	tmpl := o.compile(env.Cluster, env.Inventory)
	for i := range env.Rows {
		r := &env.Rows[i]
		p := tmpl.expand(r)
		groups[p] = append(groups[p], r)
	}
	if len(groups) == 0 && o.Mode == v1alpha1.LayoutDocument {
		// An empty inventory is still a document: readers see zero rows, not a missing file.
		groups[o.Path(env.Cluster, env.Inventory, &export.Row{Origin: &export.Origin{}})] = nil
	}
	paths := make([]string, 0, len(groups))
	for p := range groups {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	files := make([]File, len(paths))
	for i, p := range paths {
		known := ""
		if len(groups[p]) == len(env.Rows) {
			known = env.Checksum // the whole snapshot: its checksum is already known
		}
		data, err := o.encode(env.Cluster, env.Inventory, groups[p], known)
		if err != nil {
			return nil, sink.TerminalError(fmt.Errorf("rendering %s: %w", p, err))
		}
		sum := sha256.Sum256(data)
		files[i] = File{Path: p, SHA256: hex.EncodeToString(sum[:]), Size: len(data), Rows: len(groups[p]), Data: data}
	}
	return &Rendered{
		Manifest:     o.manifest(env, files),
		ManifestPath: ManifestPath(env.Cluster, env.Inventory),
		Matcher:      o.Matcher(env.Cluster, env.Inventory),
	}, nil
}

// encode serializes one document; checksum is the rows' checksum when known, else computed.
func (o Options) encode(cluster, inventory string, rows []*export.Row, checksum string) ([]byte, error) {
	if checksum == "" && (o.Format == v1alpha1.FormatYAML || o.Format == v1alpha1.FormatJSON) {
		checksum = DocumentChecksum(rows)
	}
	var data []byte
	var err error
	switch o.Format {
	case v1alpha1.FormatYAML:
		data, err = encodeYAML(cluster, inventory, checksum, rows)
	case v1alpha1.FormatJSON:
		data = encodeJSON(cluster, inventory, checksum, rows)
	case v1alpha1.FormatNDJSON:
		data = encodeNDJSON(rows)
	case v1alpha1.FormatCSV:
		data, err = encodeCSV(o.Promoted, rows)
	case v1alpha1.FormatParquet:
		return encodeParquet(o, rows) // compresses its own pages
	default:
		return nil, fmt.Errorf("unknown format %q", o.Format)
	}
	if err != nil {
		return nil, err
	}
	return compressBytes(o.Compression, data)
}

// Plan is what a store must do to go from its current files to a rendered export.
type Plan struct {
	// Write are the documents that are new or whose content changed.
	Write []File
	// Delete are owned paths that the export no longer holds.
	Delete []string
	// Unchanged counts documents already stored with the same hash.
	Unchanged int
}

// Plan compares the rendered files with the stored ones. recorded maps the paths the
// previous manifest of this cluster and inventory lists to their SHA-256 hex: they are this
// export's own, whatever template wrote them, so a layout change prunes the old layout.
// listed are paths found in the store without a record (first export, resync): they are
// rewritten or pruned only when the matcher owns them, so nothing of another cluster or
// inventory is ever deleted.
func (r *Rendered) Plan(recorded map[string]string, listed []string) Plan {
	var p Plan
	keep := make(map[string]bool, len(r.Manifest.Files))
	for _, f := range r.Manifest.Files {
		keep[f.Path] = true
		if h, ok := recorded[f.Path]; ok && h == f.SHA256 {
			p.Unchanged++
			continue
		}
		p.Write = append(p.Write, f)
	}
	for path := range recorded {
		if !keep[path] && path != r.ManifestPath {
			p.Delete = append(p.Delete, path)
		}
	}
	for _, path := range listed {
		if _, ok := recorded[path]; !ok && !keep[path] && r.Matcher.Match(path) {
			p.Delete = append(p.Delete, path)
		}
	}
	sort.Strings(p.Delete)
	return p
}

// Paths returns up to n document paths, for previews.
func (r *Rendered) Paths(n int) []string {
	var out []string
	for _, f := range r.Manifest.Files {
		if len(out) == n {
			break
		}
		out = append(out, f.Path)
	}
	return out
}

// Partial is the part of an export that a diff touches: the documents holding a changed row
// (rendered again whole, since a document may hold unchanged rows too) and the paths of
// documents left without rows.
type Partial struct {
	Files  []File
	Delete []string
}

// RenderChanged renders only the documents the diff touches. It is correct only when the
// store holds exactly the previous snapshot rendered with the same options; callers fall
// back to Render otherwise.
func (o Options) RenderChanged(env *export.Envelope, d *export.Diff) (*Partial, error) {
	tmpl := o.compile(env.Cluster, env.Inventory)
	touched := map[string]bool{}
	for _, rows := range [][]export.Row{d.Added, d.Changed, d.Deleted} {
		for i := range rows {
			touched[tmpl.expand(&rows[i])] = true
		}
	}
	groups := map[string][]*export.Row{}
	for i := range env.Rows {
		r := &env.Rows[i]
		if p := tmpl.expand(r); touched[p] {
			groups[p] = append(groups[p], r)
		}
	}
	out := &Partial{}
	for p := range touched {
		rows, ok := groups[p]
		if !ok && !(o.Mode == v1alpha1.LayoutDocument && len(env.Rows) == 0) {
			out.Delete = append(out.Delete, p)
			continue
		}
		known := ""
		if len(rows) == len(env.Rows) {
			known = env.Checksum
		}
		data, err := o.encode(env.Cluster, env.Inventory, rows, known)
		if err != nil {
			return nil, sink.TerminalError(fmt.Errorf("rendering %s: %w", p, err))
		}
		sum := sha256.Sum256(data)
		out.Files = append(out.Files, File{Path: p, SHA256: hex.EncodeToString(sum[:]), Size: len(data), Rows: len(rows), Data: data})
	}
	sort.Slice(out.Files, func(i, j int) bool { return out.Files[i].Path < out.Files[j].Path })
	sort.Strings(out.Delete)
	return out, nil
}

// Patch renders only the documents a diff touches and applies them to the manifest of the
// previous snapshot, which the store holds: the new manifest lists every document, the plan
// writes the touched ones whose bytes changed and deletes those left without rows. Callers
// check first that old is Current for the diff's previous checksum.
func (o Options) Patch(old *Manifest, env *export.Envelope, d *export.Diff) (*Rendered, Plan, error) {
	part, err := o.RenderChanged(env, d)
	if err != nil {
		return nil, Plan{}, err
	}
	files := make(map[string]File, len(old.Files)+len(part.Files))
	for _, f := range old.Files {
		files[f.Path] = f
	}
	var plan Plan
	for _, f := range part.Files {
		if prev, ok := files[f.Path]; ok && prev.SHA256 == f.SHA256 {
			plan.Unchanged++
		} else {
			plan.Write = append(plan.Write, f)
		}
		files[f.Path] = f
	}
	for _, p := range part.Delete {
		if _, ok := files[p]; ok {
			plan.Delete = append(plan.Delete, p)
			delete(files, p)
		}
	}
	plan.Unchanged += len(files) - len(part.Files)
	list := make([]File, 0, len(files))
	for _, f := range files {
		list = append(list, f)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Path < list[j].Path })
	r := &Rendered{
		Manifest:     o.manifest(env, list),
		ManifestPath: ManifestPath(env.Cluster, env.Inventory),
		Matcher:      o.Matcher(env.Cluster, env.Inventory),
	}
	return r, plan, nil
}

func (o Options) manifest(env *export.Envelope, files []File) Manifest {
	return Manifest{
		SchemaVersion: export.SchemaVersion,
		Cluster:       env.Cluster,
		Inventory:     env.Inventory,
		Generation:    env.Generation,
		ExportedAt:    env.ExportedAt.UTC(),
		ConfirmedAt:   env.ExportedAt.UTC(),
		ItemCount:     len(env.Rows),
		Checksum:      env.Checksum,
		Format:        string(o.Format),
		Compression:   string(o.Compression),
		Layout:        string(o.Mode),
		PathTemplate:  o.Template,
		Promoted:      o.Promoted,
		Renderer:      RendererVersion,
		Writer:        env.Writer,
		Coverage:      env.Coverage,
		Files:         files,
	}
}
