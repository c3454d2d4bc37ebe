package offline

import (
	"encoding/json"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"kollect.dev/agent/internal/collector"
	"kollect.dev/agent/internal/export"
)

// Hooks let a caller watch a Stream's work without holding what it does not need.
type Hooks struct {
	// Row, when set, sees each row a target produces, once per target however many
	// inventories hold it, before rollups.
	Row func(t *collector.Target, r *export.Row)
	// Failure, when set, receives each failure instead of Finish returning it, so that the
	// caller decides what of the object to keep.
	Failure func(Failure)
}

// Kind is one kind a Stream needs, with the resource to list it from.
type Kind struct {
	GVK      schema.GroupVersionKind
	Resource schema.GroupVersionResource
}

// TargetStats are what a Stream counted for one target.
type TargetStats struct {
	// Listed counts the objects of the target's kind the stream was given; Matched those the
	// target selects (for a decoding target: the releases, one per release); Rows the rows it
	// produced and Failed the selected objects whose extraction failed.
	Listed, Matched, Rows, Failed int64
}

// Stream runs jobs over objects handed to it a page at a time, so that a caller listing a
// cluster never holds more than a page of objects: each object becomes its rows (or a failure)
// when it is added. Rows are kept per inventory until Finish sorts them and adds rollups.
type Stream struct {
	cluster  string
	nsLabels func(string) (labels.Set, bool)
	hooks    Hooks
	// targets are the distinct targets of the jobs, sorted by key; byGVK indexes them.
	targets []*streamTarget
	byGVK   map[schema.GroupVersionKind][]*streamTarget
	kinds   []Kind
	invs    map[string]*streamInventory
	// failures are kept only without Hooks.Failure.
	failures []Failure
}

type streamTarget struct {
	t     *collector.Target
	invs  []string // the inventories holding the target's rows
	stats TargetStats
	// origins are the target's rows' origins, one per inventory (and the one without an
	// inventory that Hooks.Row sees), made on first use: rows share them.
	origins map[string]*export.Origin
	// decoded collects a decoding target's releases across pages (see decode.go).
	decoded *releases
}

type streamInventory struct {
	rows    []export.Row
	rollups *Rollups
}

// NewStream prepares a stream for the jobs (see Plan). nsLabels returns a namespace's labels
// for namespaces.selector, nil treats every namespace as unlabelled.
func NewStream(jobs []Job, cluster string, nsLabels func(string) (labels.Set, bool), hooks Hooks) *Stream {
	s := &Stream{cluster: cluster, nsLabels: nsLabels, hooks: hooks, byGVK: map[schema.GroupVersionKind][]*streamTarget{},
		invs: map[string]*streamInventory{}}
	byKey := map[collector.TargetKey]*streamTarget{}
	for _, j := range jobs {
		inv := s.invs[j.Inventory]
		if inv == nil {
			inv = &streamInventory{}
			s.invs[j.Inventory] = inv
		}
		if j.Rollups != nil {
			inv.rollups = j.Rollups
		}
		st := byKey[j.Target.Key]
		if st == nil {
			st = &streamTarget{t: j.Target}
			if j.Target.Profile.Decode != "" {
				st.decoded = &releases{latest: map[releaseKey]decodedRelease{}}
			}
			byKey[j.Target.Key] = st
			s.targets = append(s.targets, st)
		}
		st.invs = append(st.invs, j.Inventory)
	}
	sort.Slice(s.targets, func(a, b int) bool { return s.targets[a].t.Key.String() < s.targets[b].t.Key.String() })
	for _, st := range s.targets {
		gvk := st.t.GVK
		if _, ok := s.byGVK[gvk]; !ok {
			s.kinds = append(s.kinds, Kind{GVK: gvk, Resource: st.t.Resource})
		}
		s.byGVK[gvk] = append(s.byGVK[gvk], st)
	}
	return s
}

// Kinds lists the kinds the stream needs, each once, in the order of their first target.
func (s *Stream) Kinds() []Kind { return s.kinds }

// Targets returns the stream's targets, sorted by key.
func (s *Stream) Targets() []*collector.Target {
	out := make([]*collector.Target, len(s.targets))
	for i, st := range s.targets {
		out[i] = st.t
	}
	return out
}

// Stats returns what the stream counted for a target so far (decoding targets: after Finish).
func (s *Stream) Stats(k collector.TargetKey) TargetStats {
	for _, st := range s.targets {
		if st.t.Key == k {
			return st.stats
		}
	}
	return TargetStats{}
}

// Add runs every target of gvk over one page of its objects. The stream keeps none of them:
// only rows, and for a decoding target each release's newest revision decoded.
//
// Selection is the collector's (Target.Selects), with the rule that a profile reading Secrets
// as they are reads them only in namespaces labelled kollect.dev/secret-extraction=allow
// (collector/secrets.go). Previews need it: they run in the agent, with the agent's
// credentials, for a hub operator. render and collect apply it too, though they read files or
// use the caller's own credentials, because they show what the agent would export.
func (s *Stream) Add(gvk schema.GroupVersionKind, page []*unstructured.Unstructured) {
	for _, st := range s.byGVK[gvk] {
		st.stats.Listed += int64(len(page))
		if st.decoded != nil {
			st.decoded.add(st.t, page)
			continue
		}
		t := st.t
		for _, obj := range page {
			if !t.Selects(obj, s.nsLabels) {
				continue
			}
			st.stats.Matched++
			attrs, err := t.Profile.ExtractJSON(obj.Object)
			if err != nil && attrs == nil { // a row cut to fullObject.maxBytes is still exported
				s.fail(st, Failure{Target: t.Key, Object: obj, Err: err})
				continue
			}
			s.emit(st, obj.GetNamespace(), obj.GetName(), string(obj.GetUID()), attrs)
		}
	}
}

func (s *Stream) fail(st *streamTarget, f Failure) {
	st.stats.Failed++
	if s.hooks.Failure != nil {
		s.hooks.Failure(f)
		return
	}
	s.failures = append(s.failures, f)
}

// emit files a target's row of an object under each of its inventories.
func (s *Stream) emit(st *streamTarget, namespace, name, uid string, attrs json.RawMessage) {
	st.stats.Rows++
	if s.hooks.Row != nil {
		r := export.NewRow(s.origin(st, ""), namespace, name, uid, attrs)
		s.hooks.Row(st.t, &r)
	}
	for _, inv := range st.invs {
		s.invs[inv].rows = append(s.invs[inv].rows, export.NewRow(s.origin(st, inv), namespace, name, uid, attrs))
	}
}

// origin is the origin of a target's rows in inventory inv.
func (s *Stream) origin(st *streamTarget, inv string) *export.Origin {
	if o, ok := st.origins[inv]; ok {
		return o
	}
	t := st.t
	o := &export.Origin{Cluster: s.cluster, Inventory: inv, Target: t.Key.String(), Group: t.GVK.Group, Version: t.GVK.Version,
		Kind: t.GVK.Kind, Profile: t.Provenance().Name, ProfileGeneration: t.Provenance().Generation}
	if st.origins == nil {
		st.origins = map[string]*export.Origin{}
	}
	st.origins[inv] = o
	return o
}

// InventoryRows are one inventory's rows as one full export holds them.
type InventoryRows struct {
	Inventory string
	// Targets name the inventory's targets as rows do, sorted.
	Targets []string
	Rows    []export.Row
}

// Finish completes decoding targets, then returns each inventory's rows in canonical order
// with its rollups (inventories sorted by name), and the failures (none with Hooks.Failure).
func (s *Stream) Finish() ([]export.Row, []Failure) {
	var out []export.Row
	for _, inv := range s.FinishInventories() {
		out = append(out, inv.Rows...)
	}
	return out, s.failures
}

// FinishInventories is Finish by inventory. Inventories without rows are included.
func (s *Stream) FinishInventories() []InventoryRows {
	for _, st := range s.targets {
		if st.decoded != nil {
			st.decoded.finish(s, st)
			st.decoded = nil
		}
	}
	names := make([]string, 0, len(s.invs))
	for n := range s.invs {
		names = append(names, n)
	}
	sort.Strings(names)
	targets := map[string][]string{}
	for _, st := range s.targets {
		for _, inv := range st.invs {
			targets[inv] = append(targets[inv], st.t.Key.String())
		}
	}
	out := make([]InventoryRows, 0, len(names))
	for _, n := range names {
		inv := s.invs[n]
		rows := export.NewSnapshot(withRollups(inv.rollups, inv.rows, s.cluster, n)).Rows
		out = append(out, InventoryRows{Inventory: n, Targets: targets[n], Rows: rows})
		inv.rows = nil
	}
	return out
}
