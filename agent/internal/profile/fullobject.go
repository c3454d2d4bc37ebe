package profile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// DefaultFullObjectMaxBytes is fullObject.maxBytes when the profile leaves it out (the CRD
// defaults it too; this covers objects built in code and bundles rendered offline).
const DefaultFullObjectMaxBytes = 64 << 10

// defaultPrune is what every full-object export leaves out: fields that change on every write
// (resourceVersion, managedFields' timestamps) or repeat the object itself (the last-applied
// annotation), so a row changes only when the object's content does.
var defaultPrune = [][]string{
	{"metadata", "resourceVersion"},
	{"metadata", "selfLink"},
	{"metadata", "annotations", "kubectl.kubernetes.io/last-applied-configuration"},
}

var managedFieldsPath = []string{"metadata", "managedFields"}

// protectedPaths are never cut for size: without them a reader cannot tell what the object is.
var protectedPaths = [][]string{{"apiVersion"}, {"kind"}, {"metadata", "name"}, {"metadata", "namespace"}}

// TruncatedError says an object was exported cut to the profile's fullObject.maxBytes. It comes
// with the row, not instead of it: the row is exported, and lists Paths in its
// <attribute>Truncated attribute.
type TruncatedError struct {
	MaxBytes int
	Paths    []string
}

func (e *TruncatedError) Error() string {
	return fmt.Sprintf("larger than maxBytes %d, exported without %s", e.MaxBytes, strings.Join(e.Paths, ", "))
}

// IsTruncated reports whether err says the object was exported cut, rather than not exported.
func IsTruncated(err error) bool {
	var t *TruncatedError
	return errors.As(err, &t)
}

// fullObject is a compiled FullObject: its prune paths parsed once.
type fullObject struct {
	attribute, truncatedAttribute string
	prune                         [][]string
	status                        bool
	maxBytes                      int
}

func compileFullObject(gvk kollectv1.GroupVersionKind, spec *kollectv1.FullObject) (*fullObject, []string) {
	var problems []string
	if gvk.Group == "" && gvk.Kind == "Secret" {
		problems = append(problems, "fullObject cannot export Secrets: extract the fields you need with attributes")
	}
	f := &fullObject{attribute: spec.Attribute, status: spec.Status, maxBytes: int(spec.MaxBytes)}
	if f.attribute == "" {
		f.attribute = "object"
	}
	f.truncatedAttribute = f.attribute + "Truncated"
	if f.maxBytes <= 0 {
		f.maxBytes = DefaultFullObjectMaxBytes
	}
	f.prune = slices.Clone(defaultPrune)
	if !spec.KeepManagedFields {
		f.prune = append(f.prune, managedFieldsPath)
	}
	for _, p := range spec.Prune {
		path, err := parsePath(p)
		if err != nil {
			problems = append(problems, fmt.Sprintf("fullObject.prune %q: %v", p, err))
			continue
		}
		f.prune = append(f.prune, path)
	}
	return f, problems
}

// parsePath splits a dot-separated path; `\.` is a dot inside a key (annotation names).
func parsePath(s string) ([]string, error) {
	var path []string
	var cur strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && i+1 < len(s) && s[i+1] == '.':
			cur.WriteByte('.')
			i++
		case s[i] == '.':
			if cur.Len() == 0 {
				return nil, errors.New("empty path segment")
			}
			path = append(path, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(s[i])
		}
	}
	if cur.Len() == 0 {
		return nil, errors.New("empty path segment")
	}
	return append(path, cur.String()), nil
}

// formatPath is parsePath's inverse.
func formatPath(path []string) string {
	escaped := make([]string, len(path))
	for i, p := range path {
		escaped[i] = strings.ReplaceAll(p, ".", `\.`)
	}
	return strings.Join(escaped, ".")
}

// export returns the object as it is exported and, when it had to be cut, the paths removed.
// The informer's object is never modified: maps on a pruned path are copied, everything else
// is shared.
func (f *fullObject) export(obj map[string]any) (map[string]any, []string, error) {
	out := obj
	if !f.status {
		out, _ = without(out, []string{"status"})
	}
	for _, p := range f.prune {
		out, _ = without(out, p)
	}
	size, err := encodedSize(out)
	if err != nil {
		return nil, nil, err
	}
	var cut []string
	// Each pass estimates what removing an entry saves; a second pass covers the estimate's
	// slack (separators), and the bound keeps a pathological object from looping.
	for pass := 0; size > f.maxBytes && pass < 4; pass++ {
		var removed [][]string
		out, removed, _ = shrink(out, nil, size-f.maxBytes)
		if len(removed) == 0 {
			break // only protected fields are left
		}
		for _, r := range removed {
			cut = append(cut, formatPath(r))
		}
		if size, err = encodedSize(out); err != nil {
			return nil, nil, err
		}
	}
	slices.Sort(cut)
	return out, cut, nil
}

// without returns m without the value at path, and whether it had one. Maps along the path are
// copied; a map emptied by the removal goes too (an annotations map that held only the
// last-applied configuration).
func without(m map[string]any, path []string) (map[string]any, bool) {
	v, ok := m[path[0]]
	if !ok {
		return m, false
	}
	out := maps.Clone(m)
	if len(path) == 1 {
		delete(out, path[0])
		return out, true
	}
	child, isMap := v.(map[string]any)
	if !isMap {
		return m, false
	}
	rest, changed := without(child, path[1:])
	if !changed {
		return m, false
	}
	if len(rest) == 0 {
		delete(out, path[0])
	} else {
		out[path[0]] = rest
	}
	return out, true
}

type sizedEntry struct {
	key  string
	size int
}

// shrink removes entries from m, largest first, until about need bytes are saved. An entry
// larger than what is still needed is cut inside when it is a map (one key of a ConfigMap's
// data rather than all of it); protected paths and their parents are only ever cut inside.
func shrink(m map[string]any, prefix []string, need int) (map[string]any, [][]string, int) {
	entries := make([]sizedEntry, 0, len(m))
	for k, v := range m {
		size, err := encodedSize(v)
		if err != nil {
			continue
		}
		entries = append(entries, sizedEntry{key: k, size: size + len(k) + 4}) // "k": and a comma
	}
	slices.SortFunc(entries, func(a, b sizedEntry) int {
		if a.size != b.size {
			return b.size - a.size
		}
		return strings.Compare(a.key, b.key)
	})
	// out is m until the first cut, then m's copy: the informer's object is never modified.
	out, copied := m, false
	set := func(key string, v map[string]any) {
		if !copied {
			out, copied = maps.Clone(m), true
		}
		if v == nil {
			delete(out, key)
		} else {
			out[key] = v
		}
	}
	var removed [][]string
	saved := 0
	for _, e := range entries {
		if saved >= need {
			break
		}
		path := append(slices.Clip(prefix), e.key)
		protected, parent := protection(path)
		if protected {
			continue
		}
		child, isMap := m[e.key].(map[string]any)
		if isMap && (parent || e.size > need-saved) {
			newChild, r, s := shrink(child, path, need-saved)
			if len(r) > 0 {
				set(e.key, newChild)
				removed, saved = append(removed, r...), saved+s
			}
			if parent || len(r) > 0 {
				continue // cut inside; an entry left with nothing to cut inside goes whole
			}
		}
		if parent {
			continue
		}
		set(e.key, nil)
		removed, saved = append(removed, path), saved+e.size
	}
	return out, removed, saved
}

// protection says whether path is protected, or the parent of a protected path.
func protection(path []string) (protected, parent bool) {
	for _, p := range protectedPaths {
		if slices.Equal(p, path) {
			return true, false
		}
		if len(p) > len(path) && slices.Equal(p[:len(path)], path) {
			parent = true
		}
	}
	return false, parent
}

// encodedSize is the length of v as canonical JSON (the encoding rows carry).
func encodedSize(v any) (int, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return 0, fmt.Errorf("encoding the object: %w", err)
	}
	return buf.Len() - 1, nil
}
