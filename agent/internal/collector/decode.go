package collector

import (
	"k8s.io/apimachinery/pkg/fields"

	"kollect.dev/agent/internal/helmrelease"
	"kollect.dev/agent/internal/profile"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// decodedObject is an object's decoded document (profile.Compiled.Decode), made once per
// object version in the transform and dropped with the object: only the rows are stored.
type decodedObject struct {
	doc map[string]any
	// plain is doc without its values, for the profiles that do not ask for them.
	plain map[string]any
	err   error
}

// view is the document a profile reads: with the redacted values only when it asks.
func (d *decodedObject) view(c *profile.Compiled) map[string]any {
	if c.DecodeValues {
		return d.doc
	}
	if d.plain == nil {
		d.plain = make(map[string]any, len(d.doc))
		for k, v := range d.doc {
			if k != "values" {
				d.plain[k] = v
			}
		}
	}
	return d.plain
}

// decodeFor decodes an object for the projection's decoding profiles; nil when none decodes
// or the object is not what they decode. A failure is kept (it is each decoding profile's
// extraction error) and it.release is still set from the Secret's name when it can be.
func (p *projection) decodeFor(it *item, content map[string]any) *decodedObject {
	if !p.decodes || !helmrelease.IsRelease(content) {
		return nil
	}
	doc, rel, err := helmrelease.Decode(content, helmrelease.Options{Values: p.decodeValues})
	if err != nil {
		if r, ok := helmrelease.FromSecretName(it.namespace, it.name); ok {
			it.more().release = &r
		}
		return &decodedObject{err: err}
	}
	it.more().release = &rel
	return &decodedObject{doc: doc}
}

// decoderFieldSelector is what a decoder watches: the API server sends only release Secrets.
func decoderFieldSelector(c *profile.Compiled, sel fields.Selector) fields.Selector {
	if c == nil || c.Decode != kollectv1.DecodeHelmRelease {
		return sel
	}
	only := fields.OneTermEqualSelector("type", helmrelease.SecretType)
	if sel.Empty() {
		return only
	}
	return fields.AndSelectors(sel, only)
}

// latestRevisions keeps, of the items of a decoding target, one per release: the highest
// revision (Helm keeps up to --history-max of them). Items that are no release pass.
func latestRevisions(items []*item) []*item {
	type key struct{ ns, name string }
	top := map[key]int64{}
	for _, it := range items {
		if r := it.release(); r != nil && r.Revision > top[key{r.Namespace, r.Name}] {
			top[key{r.Namespace, r.Name}] = r.Revision
		}
	}
	out := items[:0:0]
	for _, it := range items {
		if r := it.release(); r == nil || r.Revision == top[key{r.Namespace, r.Name}] {
			out = append(out, it)
		}
	}
	return out
}

// rowIdentity is the name and UID a target's row of the item carries: a decoded release is
// named by the release and keeps one UID across its revisions.
func rowIdentity(t *Target, it *item) (name, uid string) {
	if r := it.release(); t.Profile != nil && t.Profile.Decode != "" && r != nil {
		return r.Name, r.UID
	}
	return it.name, it.uid
}
