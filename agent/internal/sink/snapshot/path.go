package snapshot

import (
	"regexp"
	"strings"

	"kollect.dev/agent/internal/export"
)

// ClusterScoped stands in for the empty namespace of cluster-scoped resources, and CoreGroup
// for the empty API group, so no path segment is ever empty.
const (
	ClusterScoped = "_cluster"
	CoreGroup     = "core"
)

// segment makes a value safe as one path segment: Kubernetes names never hold a slash, but a
// value from elsewhere must not climb out of its directory.
func segment(s string) string {
	s = strings.ReplaceAll(s, "/", "_")
	if s == "" || s == "." || s == ".." {
		return "_" + s
	}
	return s
}

// prefixPath cleans the cluster and inventory names, which the agent provides, the same way.
func prefixPath(s string) string { return segment(s) }

// Path expands the template for one row.
func (o Options) Path(cluster, inventory string, r *export.Row) string {
	return o.compile(cluster, inventory).expand(r)
}

// pathTemplate is a template split once into literal text and row placeholders, so that
// expanding it for each of 100k rows is a few appends.
type pathTemplate struct {
	parts []string // literal text, or a row placeholder such as "{name}"
}

func (o Options) compile(cluster, inventory string) pathTemplate {
	fixed := strings.NewReplacer("{cluster}", prefixPath(cluster), "{inventory}", prefixPath(inventory), "{ext}", o.Ext())
	var pt pathTemplate
	t := o.Template
	for len(t) > 0 {
		open := strings.IndexByte(t, '{')
		if open < 0 {
			pt.parts = append(pt.parts, fixed.Replace(t))
			break
		}
		end := strings.IndexByte(t[open:], '}') + open
		ph := t[open : end+1]
		if contains(rowPlaceholders, ph) {
			pt.parts = append(pt.parts, fixed.Replace(t[:open]), ph)
		} else {
			pt.parts = append(pt.parts, fixed.Replace(t[:end+1]))
		}
		t = t[end+1:]
	}
	return pt
}

func (pt pathTemplate) expand(r *export.Row) string {
	var sb strings.Builder
	sb.Grow(96)
	for _, p := range pt.parts {
		switch p {
		case "{namespace}":
			ns := r.Namespace
			if ns == "" {
				ns = ClusterScoped
			}
			sb.WriteString(segment(ns))
		case "{kind}":
			sb.WriteString(segment(r.Kind))
		case "{name}":
			sb.WriteString(segment(r.Name))
		case "{group}":
			group := r.Group
			if group == "" {
				group = CoreGroup
			}
			sb.WriteString(segment(group))
		case "{version}":
			sb.WriteString(segment(r.Version))
		case "{target}":
			sb.WriteString(segment(r.Target))
		default:
			sb.WriteString(p)
		}
	}
	return sb.String()
}

// ManifestPath is where the manifest of an inventory lives, beside its documents.
func ManifestPath(cluster, inventory string) string {
	return prefixPath(cluster) + "/" + prefixPath(inventory) + ".manifest.json"
}

// Matcher recognises the paths this template produces for one cluster and inventory: the
// files an export owns and may prune. Row placeholders match one path segment (or part of
// one); the manifest and the coverage file never match.
type Matcher struct {
	re       *regexp.Regexp
	manifest string
	coverage string
	// Prefix is the longest directory every matching path starts with ("" or ending in "/"),
	// for listing a store.
	Prefix string
}

// Matcher builds the prune matcher for cluster and inventory.
func (o Options) Matcher(cluster, inventory string) *Matcher {
	fixed := map[string]string{
		"{cluster}":   prefixPath(cluster),
		"{inventory}": prefixPath(inventory),
		"{ext}":       o.Ext(),
	}
	var re strings.Builder
	var literal strings.Builder // the template expanded up to the first row placeholder
	varying := false
	re.WriteString("^")
	t := o.Template
	for len(t) > 0 {
		open := strings.IndexByte(t, '{')
		if open < 0 {
			re.WriteString(regexp.QuoteMeta(t))
			if !varying {
				literal.WriteString(t)
			}
			break
		}
		re.WriteString(regexp.QuoteMeta(t[:open]))
		if !varying {
			literal.WriteString(t[:open])
		}
		end := strings.IndexByte(t[open:], '}') + open
		ph := t[open : end+1]
		if v, ok := fixed[ph]; ok {
			re.WriteString(regexp.QuoteMeta(v))
			if !varying {
				literal.WriteString(v)
			}
		} else {
			re.WriteString(`[^/]+`)
			varying = true
		}
		t = t[end+1:]
	}
	re.WriteString("$")
	prefix := literal.String()
	if varying {
		prefix = prefix[:strings.LastIndexByte(prefix, '/')+1]
	}
	return &Matcher{re: regexp.MustCompile(re.String()), manifest: ManifestPath(cluster, inventory),
		coverage: o.CoveragePath(cluster, inventory), Prefix: prefix}
}

// Match reports whether path is one of this inventory's documents.
func (m *Matcher) Match(path string) bool {
	return path != m.manifest && path != m.coverage && m.re.MatchString(path)
}

// SamplePath is a document path with the row placeholders shown as <namespace>, <kind>, …,
// for previews, which run before any row exists.
func (o Options) SamplePath(cluster, inventory string) string {
	return o.Path(cluster, inventory, &export.Row{Origin: &export.Origin{Target: "<target>", Group: "<group>", Version: "<version>", Kind: "<kind>"}, Namespace: "<namespace>", Name: "<name>"})
}
