package collector

import (
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"kollect.dev/agent/internal/profile"
)

// skipReason says why a profile was not evaluated on an object; zero when it was.
type skipReason uint8

const (
	evaluated skipReason = iota
	// notSelected: no target using the profile selects the object.
	notSelected
	// skippedQuarantined: the profile was quarantined (see budget) when the object came.
	skippedQuarantined
)

// project fills an item's matches and attributes: select before extract.
//
// Why: a kind's watch is shared by every target of the kind, and its transform runs once per
// object version, serially. Evaluating every profile on every object would let one tenant's
// expensive profile slow the projection of every other tenant's objects — in namespaces and
// names its targets never select. So each target's cheap selection (namespaces and their
// labels, names, labels, a field selector the API server could not apply) is applied first,
// then its match expression, and a profile runs only on objects at least one of its targets
// selects. Selection is applied again when a target is collected (Collect), against the
// namespace labels of that moment; a namespace that was refused here by its labels is
// remembered so that a relabelling that selects it restarts the watch (NamespacesChanged), and
// every other change of a target's selection restarts it anyway (projectionID).
//
// A decoding profile (decode.go) reads dec, the object's decoded document, instead: its
// targets' names select the release, their match expressions read the document, and a
// failed decoding is its extraction error on every object its targets select.
func (w *gvkWatch) project(it *item, content map[string]any, dec *decodedObject) {
	proj := w.proj
	var needSmall [64]bool
	need := needSmall[:0]
	if n := len(proj.profileKeys); n <= len(needSmall) {
		need = needSmall[:n]
	} else {
		need = make([]bool, n)
	}
	var objLabels labels.Labels
	consider := func(ti int) {
		t := proj.targets[ti]
		pi, oi := proj.targetProfile[ti], proj.targetObject[ti]
		b := proj.budgets[pi]
		if b.isTripped() || (need[pi] && oi < 0) {
			return // quarantined, or already needed and nothing else to learn
		}
		prof := proj.profiles[proj.profileKeys[pi]]
		if prof.Decode != "" && dec == nil {
			return // not what the profile decodes (the watch is shared with other profiles)
		}
		name, _ := rowIdentity(t, it)
		if !w.mightSelect(t, it, name, content, &objLabels) {
			return
		}
		ok := true
		if oi >= 0 {
			if t.match != nil && (dec == nil || dec.err == nil) {
				var cost uint64
				var err error
				ok, cost, err = profile.EvalMatchCost(t.match, profileContent(prof, content, dec))
				proj.counters[pi].observe(cost, false)
				w.charge(pi, cost)
				if err != nil {
					// Not selected, but not silently: the target reports it (MatchFailed).
					it.setMatchErr(oi, len(proj.objectTargets), err)
				}
			}
			if ok && !t.fieldSelector.Empty() && !t.fieldSelector.Matches(fieldSet(content, t.fieldSelector)) {
				ok = false
			}
			it.setMatch(oi, ok)
		}
		need[pi] = need[pi] || ok
	}
	// Only the targets that may select in the object's namespace: with a target per tenant,
	// each naming its namespace, every object was checked against every tenant's target.
	for _, ti := range proj.targetsAnyNamespace {
		consider(ti)
	}
	for _, ti := range proj.targetsByNamespace[it.namespace] {
		consider(ti)
	}
	for pi, key := range proj.profileKeys {
		switch {
		case proj.budgets[pi].isTripped():
			it.addAttr(pi, extraction{skip: skippedQuarantined})
		case !need[pi]:
			// Not stored: a profile absent from attrs was not selected (item.attr).
		default:
			prof := proj.profiles[key]
			if prof.Decode != "" && dec != nil && dec.err != nil {
				it.addAttr(pi, extraction{err: dec.err})
				continue
			}
			raw, cost, err := prof.ExtractJSONCost(profileContent(prof, content, dec))
			// A string of exactly the encoding's length: the encoder's buffer is larger, and
			// the item keeps this for as long as the object is unchanged.
			it.addAttr(pi, extraction{json: string(raw), err: err})
			proj.counters[pi].observe(cost, true)
			w.charge(pi, cost)
		}
	}
	if it.rest != nil {
		it.rest.attrs = slices.Clip(it.rest.attrs)
	}
}

// mightSelect applies a target's selection that needs no expression: what the target selects
// is a subset of what passes. A namespace whose labels are not known yet passes.
// name is the object's name as the target selects it (rowIdentity).
func (w *gvkWatch) mightSelect(t *Target, it *item, name string, content map[string]any, objLabels *labels.Labels) bool {
	if t.Namespaced {
		ns := it.namespace
		if (len(t.includeNS) > 0 && !matchAny(t.includeNS, ns)) || matchAny(t.excludeNS, ns) {
			return false
		}
		if t.nsSelector != nil && w.proj.nsLabels != nil {
			if set, known := w.proj.nsLabels(ns); known && !t.nsSelector.Matches(set) {
				w.denyNamespace(ns)
				return false
			}
		}
	}
	// Unlike a namespace selector, the Secrets opt-in refuses a namespace whose labels are not
	// known yet: a profile must not read a Secret before the admin's grant is seen. The
	// namespace is remembered, so seeing it granted restarts the watch (nowSelected).
	if t.secretsConfined && !secretExtractionAllowed(it.namespace, w.proj.nsLabels) {
		w.denyNamespace(it.namespace)
		return false
	}
	if !t.selectsName(name) {
		return false
	}
	if !t.labelSelector.Empty() {
		if *objLabels == nil {
			*objLabels = contentLabels(content)
		}
		if !t.labelSelector.Matches(*objLabels) {
			return false
		}
	}
	return true
}

// profileContent is what a profile reads: the object, or its decoded document.
func profileContent(prof *profile.Compiled, content map[string]any, dec *decodedObject) map[string]any {
	if prof.Decode != "" && dec != nil {
		return dec.view(prof)
	}
	return content
}

// contentLabels reads an object's labels without copying them.
func contentLabels(content map[string]any) labels.Labels {
	meta, _ := content["metadata"].(map[string]any)
	l, _ := meta["labels"].(map[string]any)
	return anyLabels(l)
}

// anyLabels is labels.Labels over the labels of an unstructured object.
type anyLabels map[string]any

func (l anyLabels) Has(k string) bool { _, ok := l[k]; return ok }
func (l anyLabels) Get(k string) string {
	v, _ := l[k].(string)
	return v
}
func (l anyLabels) Lookup(k string) (string, bool) {
	v, ok := l[k]
	s, _ := v.(string)
	return s, ok
}

// charge spends a profile's budget and quarantines the profile when it runs out.
func (w *gvkWatch) charge(pi int, cost uint64) {
	if w.proj.budgets[pi].charge(cost) && w.onQuarantine != nil {
		w.onQuarantine(w.proj.profileKeys[pi])
	}
}

// denyNamespace remembers a namespace that a target's namespace selector refused here.
func (w *gvkWatch) denyNamespace(ns string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.deniedNS == nil {
		w.deniedNS = map[string]bool{}
	}
	w.deniedNS[ns] = true
}

// nowSelected reports whether a namespace refused by a namespace selector (or the Secrets
// opt-in) is selected by one now: objects there were never evaluated, so the watch must list
// them again.
func (w *gvkWatch) nowSelected(nsLabels func(string) (labels.Set, bool)) bool {
	w.mu.Lock()
	denied := make([]string, 0, len(w.deniedNS))
	for ns := range w.deniedNS {
		denied = append(denied, ns)
	}
	w.mu.Unlock()
	for _, ns := range denied {
		set, known := nsLabels(ns)
		if !known {
			continue // deleted, or not seen yet: nothing there to list again
		}
		for _, t := range w.proj.targets {
			if t.selectsByNamespaceLabels() && t.labelsSelect(set) {
				return true
			}
		}
	}
	return false
}

// behind reports whether any of the watch's informers has been busy in its transform for most
// of the last window (BehindOptions), with the busiest share.
func (w *gvkWatch) behind() (float64, bool) {
	var worst float64
	var any bool
	for _, m := range w.meters {
		f, b := m.busy()
		worst = max(worst, f)
		any = any || b
	}
	return worst, any
}

// timed wraps a transform to measure its busy share; when the watch falls behind it starts a
// watcher that tells inventories once it has caught up (no event says so).
func (w *gvkWatch) timed(m *busyMeter, fn func(any) (any, error)) func(any) (any, error) {
	return func(obj any) (any, error) {
		start := time.Now()
		out, err := fn(obj)
		m.add(time.Since(start))
		if _, b := m.busy(); b && w.synced.Load() && !w.waking.Swap(true) {
			go w.wakeWhenCaughtUp()
		}
		return out, err
	}
}

func (w *gvkWatch) wakeWhenCaughtUp() {
	tick := time.NewTicker(max(w.behindOpts.Window/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-tick.C:
		}
		if _, b := w.behind(); !b {
			w.waking.Store(false)
			if w.onEvent != nil {
				w.onEvent()
			}
			return
		}
	}
}
