package preview

import (
	"encoding/json"
	"errors"
	"hash/maphash"
	"slices"
	"sort"

	"kollect.dev/agent/internal/cli/offline"
	"kollect.dev/agent/internal/collector"
	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/profile"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// accumulator counts, per target and attribute, what the stream's rows and failures say. It
// keeps hashes of distinct values (up to the limit), a few error messages and the first
// sample rows, never the objects.
type accumulator struct {
	limit, samples int
	seed           maphash.Seed
	targets        map[collector.TargetKey]*targetAcc
}

type targetAcc struct {
	attrs   map[string]*attrAcc
	samples []export.Row // the first rows in canonical order, at most accumulator.samples
}

type attrAcc struct {
	values, errors int64
	distinct       map[uint64]struct{}
	capped         bool
	errorSamples   []*fleetv1.PreviewObjectError
}

func newAccumulator(limit, samples int) *accumulator {
	return &accumulator{limit: limit, samples: samples, seed: maphash.MakeSeed(), targets: map[collector.TargetKey]*targetAcc{}}
}

func (a *accumulator) hooks() offline.Hooks {
	return offline.Hooks{Row: a.row, Failure: a.failure}
}

func (a *accumulator) of(k collector.TargetKey) *targetAcc {
	t := a.targets[k]
	if t == nil {
		t = &targetAcc{attrs: map[string]*attrAcc{}}
		a.targets[k] = t
	}
	return t
}

func (t *targetAcc) attr(name string) *attrAcc {
	at := t.attrs[name]
	if at == nil {
		at = &attrAcc{distinct: map[uint64]struct{}{}}
		t.attrs[name] = at
	}
	return at
}

// row counts a row's attributes. Attributes are canonical JSON, so each value's bytes are its
// canonical encoding: equal values hash equal.
func (a *accumulator) row(t *collector.Target, r *export.Row) {
	ta := a.of(t.Key)
	var values map[string]json.RawMessage
	if err := json.Unmarshal(r.Attributes, &values); err == nil {
		for name, raw := range values {
			at := ta.attr(name)
			at.values++
			h := maphash.Bytes(a.seed, raw)
			if _, seen := at.distinct[h]; !seen {
				if len(at.distinct) >= a.limit {
					at.capped = true
				} else {
					at.distinct[h] = struct{}{}
				}
			}
		}
	}
	if a.samples > 0 {
		a.sample(ta, r)
	}
}

// sample keeps the first rows in canonical order: rows arrive in listing order, which is not
// quite canonical, so the smallest are kept.
func (a *accumulator) sample(ta *targetAcc, r *export.Row) {
	if len(ta.samples) == a.samples && export.Compare(r, &ta.samples[len(ta.samples)-1]) >= 0 {
		return
	}
	i, _ := slices.BinarySearchFunc(ta.samples, r, func(e export.Row, r *export.Row) int { return export.Compare(&e, r) })
	ta.samples = slices.Insert(ta.samples, i, *r)
	if len(ta.samples) > a.samples {
		ta.samples = ta.samples[:a.samples]
	}
}

// failure counts a failed extraction against the attribute it names: an AttributeError's, or
// each of a MissingError's. Other failures (a release that does not decode, fullObject) are
// counted on the target only.
func (a *accumulator) failure(f offline.Failure) {
	ta := a.of(f.Target)
	var names []string
	var ae *profile.AttributeError
	var me *profile.MissingError
	switch {
	case errors.As(f.Err, &ae):
		names = []string{ae.Attribute}
	case errors.As(f.Err, &me):
		names = me.Attributes
	}
	object := f.Object.GetName()
	if ns := f.Object.GetNamespace(); ns != "" {
		object = ns + "/" + object
	}
	for _, n := range names {
		at := ta.attr(n)
		at.errors++
		if len(at.errorSamples) < errorSamples {
			at.errorSamples = append(at.errorSamples, &fleetv1.PreviewObjectError{Object: object, Message: errorClass(f.Err)})
		}
	}
}

// target builds a target's answer: its profile's attributes in declaration order, then any
// other attribute its rows carry (fullObject's truncation list), sorted.
func (a *accumulator) target(t *collector.Target, st offline.TargetStats) *fleetv1.PreviewTarget {
	ta := a.of(t.Key)
	pt := &fleetv1.PreviewTarget{Target: t.Key.String(), Profile: t.Provenance().Name, Group: t.GVK.Group, Version: t.GVK.Version,
		Kind: t.GVK.Kind, ObjectsListed: st.Listed, ObjectsMatched: st.Matched, Rows: st.Rows, Failed: st.Failed}
	names := t.Profile.Attributes()
	var extra []string
	for n := range ta.attrs {
		if !slices.Contains(names, n) {
			extra = append(extra, n)
		}
	}
	sort.Strings(extra)
	for _, n := range append(names, extra...) {
		at := ta.attr(n)
		pt.Attributes = append(pt.Attributes, &fleetv1.PreviewAttribute{Name: n, Values: at.values,
			DistinctValues: int64(len(at.distinct)), DistinctValuesCapped: at.capped, Errors: at.errors, ErrorSamples: at.errorSamples})
	}
	for i := range ta.samples {
		r := &ta.samples[i]
		object := r.Name
		if r.Namespace != "" {
			object = r.Namespace + "/" + object
		}
		pt.Samples = append(pt.Samples, &fleetv1.PreviewSample{Object: object, AttributesJson: string(r.Attributes)})
	}
	return pt
}

// sortTargets orders the answer by target name.
func sortTargets(ts []*fleetv1.PreviewTarget) {
	sort.SliceStable(ts, func(i, j int) bool { return ts[i].GetTarget() < ts[j].GetTarget() })
}

// errorClass says what went wrong with an extraction in words that quote nothing of the
// object: a preview's answer goes to the hub, which must never hold row data. A coercion
// names the type wanted and the kind of value found, a missing attribute its name; an
// expression's own error may quote the object's data (CEL and JSONPath messages do), so it
// is named by its class only.
func errorClass(err error) string {
	var ae *profile.AttributeError
	var me *profile.MissingError
	var ce *profile.CoercionError
	switch {
	case errors.As(err, &me):
		return me.Error()
	case errors.As(err, &ae) && errors.As(err, &ce):
		return "attribute " + ae.Attribute + ": " + ce.Error()
	case errors.As(err, &ae) && profile.IsCostLimitExceeded(err):
		return "attribute " + ae.Attribute + ": the expression exceeded its cost limit"
	case errors.As(err, &ae):
		return "attribute " + ae.Attribute + ": the expression failed on this object"
	}
	return "the extraction failed"
}
