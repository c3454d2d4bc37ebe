package offline

import (
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"kollect.dev/agent/internal/collector"
	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/helmrelease"
)

// decodedRows is Rows for a decoding target, as the agent's watch computes them: each Helm
// release Secret decoded, one row per release from its highest revision, named by the release
// with the release's UID.
func decodedRows(t *collector.Target, objs []*unstructured.Unstructured, nsLabels func(string) (labels.Set, bool)) ([]export.Row, []Failure) {
	type decoded struct {
		obj *unstructured.Unstructured
		doc map[string]any
		rel helmrelease.Release
		err error
	}
	type key struct{ ns, name string }
	latest := map[key]decoded{}
	var failures []Failure
	for _, obj := range objs {
		if !helmrelease.IsRelease(obj.Object) {
			continue
		}
		doc, rel, err := helmrelease.Decode(obj.Object, helmrelease.Options{Values: t.Profile.DecodeValues})
		if err != nil {
			r, ok := helmrelease.FromSecretName(obj.GetNamespace(), obj.GetName())
			if !ok {
				if t.SelectsDecoded(obj, obj.GetName(), nil, nsLabels) {
					failures = append(failures, Failure{Target: t.Key, Object: obj, Err: err})
				}
				continue
			}
			rel = r
		}
		k := key{rel.Namespace, rel.Name}
		if prev, ok := latest[k]; !ok || rel.Revision > prev.rel.Revision {
			latest[k] = decoded{obj: obj, doc: doc, rel: rel, err: err}
		}
	}
	keys := make([]key, 0, len(latest))
	for k := range latest {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].ns < keys[j].ns || (keys[i].ns == keys[j].ns && keys[i].name < keys[j].name)
	})
	var rows []export.Row
	for _, k := range keys {
		d := latest[k]
		if !t.SelectsDecoded(d.obj, d.rel.Name, d.doc, nsLabels) {
			continue
		}
		if d.err != nil {
			failures = append(failures, Failure{Target: t.Key, Object: d.obj, Err: d.err})
			continue
		}
		attrs, err := t.Profile.ExtractJSON(d.doc)
		if err != nil {
			failures = append(failures, Failure{Target: t.Key, Object: d.obj, Err: err})
			continue
		}
		rows = append(rows, export.Row{Target: t.Key.String(), Group: t.GVK.Group, Version: t.GVK.Version, Kind: t.GVK.Kind,
			Namespace: d.rel.Namespace, Name: d.rel.Name, UID: d.rel.UID,
			Profile: t.Provenance().Name, ProfileGeneration: t.Provenance().Generation, Attributes: attrs})
	}
	return rows, failures
}
