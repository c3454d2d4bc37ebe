package offline

import (
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"kollect.dev/agent/internal/collector"
	"kollect.dev/agent/internal/helmrelease"
)

// releases is a decoding target's state across pages, as the agent's watch computes its rows:
// each Helm release Secret decoded, one row per release from its highest revision, named by
// the release with the release's UID. Only the newest revision of each release is kept, and
// of its Secret only what selection reads (slim), never the encoded release.
type releases struct {
	latest map[releaseKey]decodedRelease
}

type releaseKey struct{ ns, name string }

type decodedRelease struct {
	obj *unstructured.Unstructured
	doc map[string]any
	rel helmrelease.Release
	err error
}

func (d *releases) add(t *collector.Target, page []*unstructured.Unstructured) {
	for _, obj := range page {
		if !helmrelease.IsRelease(obj.Object) {
			continue
		}
		doc, rel, err := helmrelease.Decode(obj.Object, helmrelease.Options{Values: t.Profile.DecodeValues})
		if err != nil {
			r, ok := helmrelease.FromSecretName(obj.GetNamespace(), obj.GetName())
			if !ok { // selected by the Secret's own name at finish
				d.latest[releaseKey{"\x00" + obj.GetNamespace(), obj.GetName()}] = decodedRelease{obj: slim(obj), err: err}
				continue
			}
			rel = r
		}
		k := releaseKey{rel.Namespace, rel.Name}
		if prev, ok := d.latest[k]; !ok || rel.Revision > prev.rel.Revision {
			d.latest[k] = decodedRelease{obj: slim(obj), doc: doc, rel: rel, err: err}
		}
	}
}

// finish selects the releases, extracts their rows and reports their failures. A Secret that
// names no release (its key starts with NUL, so it sorts first) is a failure when selected.
func (d *releases) finish(s *Stream, st *streamTarget) {
	t := st.t
	keys := make([]releaseKey, 0, len(d.latest))
	for k := range d.latest {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].ns < keys[j].ns || (keys[i].ns == keys[j].ns && keys[i].name < keys[j].name)
	})
	for _, k := range keys {
		r := d.latest[k]
		name, doc := r.rel.Name, r.doc
		if k.ns != "" && k.ns[0] == 0 {
			name = r.obj.GetName()
		}
		if !t.SelectsDecoded(r.obj, name, doc, s.nsLabels) {
			continue
		}
		st.stats.Matched++
		if r.err != nil {
			s.fail(st, Failure{Target: t.Key, Object: r.obj, Err: r.err})
			continue
		}
		attrs, err := t.Profile.ExtractJSON(doc)
		if err != nil {
			s.fail(st, Failure{Target: t.Key, Object: r.obj, Err: err})
			continue
		}
		s.emit(st, r.rel.Namespace, r.rel.Name, r.rel.UID, attrs)
	}
	d.latest = nil
}

// slim is a release Secret reduced to what a target's selection reads: its metadata (without
// managedFields) and its type, the fields a Secret's field selectors may name.
func slim(obj *unstructured.Unstructured) *unstructured.Unstructured {
	out := &unstructured.Unstructured{Object: map[string]any{"apiVersion": obj.GetAPIVersion(), "kind": obj.GetKind()}}
	if md, ok := obj.Object["metadata"].(map[string]any); ok {
		m := make(map[string]any, len(md))
		for k, v := range md {
			if k != "managedFields" {
				m[k] = v
			}
		}
		out.Object["metadata"] = m
	}
	if typ, ok := obj.Object["type"]; ok {
		out.Object["type"] = typ
	}
	return out
}
