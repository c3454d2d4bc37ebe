package offline

import (
	"errors"
	"fmt"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"kollect.dev/agent/internal/collector"
	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/inventory/rollup"
	"kollect.dev/agent/internal/profile"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// Config is the Kollect configuration found in a set of objects.
type Config struct {
	profiles    map[types.NamespacedName]*kollectv1.KollectProfile
	targets     map[collector.TargetKey]targetDef
	inventories []inventoryDef
	// Others are the objects that are not Kollect configuration (the data, for render).
	Others []*unstructured.Unstructured
}

type targetDef struct {
	profileRef types.NamespacedName
	selection  kollectv1.TargetSelection
	labels     map[string]string
}

type inventoryDef struct {
	name    string // namespace/name or name, as rows carry it
	targets []collector.TargetKey
	rollups *Rollups
}

// Rollups are an inventory's rollups, computed over its rows as the agent does.
type Rollups struct {
	Specs      []rollup.Spec
	ExcludeRaw bool
	// Targets are the inventory's targets as rows name them: a rollup's when it names none.
	Targets []string
}

// Load sorts objects into Kollect configuration and everything else.
func Load(objs []*unstructured.Unstructured) (*Config, error) {
	c := &Config{profiles: map[types.NamespacedName]*kollectv1.KollectProfile{}, targets: map[collector.TargetKey]targetDef{}}
	var invs []*kollectv1.KollectInventory
	var clusterInvs []*kollectv1.KollectClusterInventory
	for _, u := range objs {
		if u.GroupVersionKind().Group != kollectv1.GroupVersion.Group {
			c.Others = append(c.Others, u)
			continue
		}
		var err error
		switch u.GetKind() {
		case "KollectProfile":
			p := &kollectv1.KollectProfile{}
			if err = convert(u, p); err == nil {
				c.profiles[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = p
			}
		case "KollectTarget":
			t := &kollectv1.KollectTarget{}
			if err = convert(u, t); err == nil {
				c.targets[collector.TargetKey{Namespace: t.Namespace, Name: t.Name}] = targetDef{
					profileRef: types.NamespacedName{Namespace: t.Namespace, Name: t.Spec.ProfileRef.Name}, selection: t.Spec.TargetSelection, labels: t.Labels}
			}
		case "KollectClusterTarget":
			t := &kollectv1.KollectClusterTarget{}
			if err = convert(u, t); err == nil {
				c.targets[collector.TargetKey{Name: t.Name}] = targetDef{
					profileRef: types.NamespacedName{Namespace: t.Spec.ProfileRef.Namespace, Name: t.Spec.ProfileRef.Name}, selection: t.Spec.TargetSelection, labels: t.Labels}
			}
		case "KollectInventory":
			i := &kollectv1.KollectInventory{}
			if err = convert(u, i); err == nil {
				invs = append(invs, i)
			}
		case "KollectClusterInventory":
			i := &kollectv1.KollectClusterInventory{}
			if err = convert(u, i); err == nil {
				clusterInvs = append(clusterInvs, i)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	for _, i := range invs {
		def, err := c.inventory(i.Namespace+"/"+i.Name, i.Namespace, i.Spec.Targets, nil, i.Spec.TargetSelector)
		if err != nil {
			return nil, err
		}
		def.withRollups(i.Spec.InventoryRollups, i.Namespace)
		c.inventories = append(c.inventories, def)
	}
	for _, i := range clusterInvs {
		def, err := c.inventory(i.Name, "", nil, i.Spec.Targets, i.Spec.TargetSelector)
		if err != nil {
			return nil, err
		}
		def.withRollups(i.Spec.InventoryRollups, "")
		c.inventories = append(c.inventories, def)
	}
	sort.Slice(c.inventories, func(a, b int) bool { return c.inventories[a].name < c.inventories[b].name })
	return c, nil
}

func convert(u *unstructured.Unstructured, into any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into)
}

// inventory resolves an inventory's targets as the agent does: named ones plus those its
// selector matches (KollectTargets of its namespace, or KollectClusterTargets).
func (c *Config) inventory(name, ns string, local []kollectv1.LocalObjectReference, cluster []kollectv1.ClusterTargetReference, sel *metav1.LabelSelector) (inventoryDef, error) {
	seen := map[collector.TargetKey]bool{}
	for _, r := range local {
		seen[collector.TargetKey{Namespace: ns, Name: r.Name}] = true
	}
	for _, r := range cluster {
		k := collector.TargetKey{Name: r.Name}
		if r.Kind == kollectv1.TargetKindNamespaced {
			k.Namespace = r.Namespace
		}
		seen[k] = true
	}
	if sel != nil {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			return inventoryDef{}, fmt.Errorf("inventory %s: targetSelector: %w", name, err)
		}
		for k, t := range c.targets {
			if k.Namespace == ns && s.Matches(labels.Set(t.labels)) {
				seen[k] = true
			}
		}
	}
	def := inventoryDef{name: name}
	for k := range seen {
		def.targets = append(def.targets, k)
	}
	sort.Slice(def.targets, func(a, b int) bool { return def.targets[a].String() < def.targets[b].String() })
	return def, nil
}

// withRollups records an inventory's rollups, once its targets are resolved.
func (d *inventoryDef) withRollups(r kollectv1.InventoryRollups, ns string) {
	if len(r.Rollups) == 0 && !r.ExcludesRaw() {
		return
	}
	d.rollups = &Rollups{Specs: rollup.FromAPI(r.Rollups, ns), ExcludeRaw: r.ExcludesRaw()}
	for _, k := range d.targets {
		d.rollups.Targets = append(d.rollups.Targets, k.String())
	}
}

// Inventories names the inventories found, sorted.
func (c *Config) Inventories() []string {
	out := make([]string, len(c.inventories))
	for i, inv := range c.inventories {
		out[i] = inv.name
	}
	return out
}

// TargetsOf names an inventory's targets as rows do, sorted, whether or not they can be
// planned; nil for an inventory the input does not hold.
func (c *Config) TargetsOf(inventory string) []string {
	for _, inv := range c.inventories {
		if inv.name == inventory {
			out := make([]string, len(inv.targets))
			for i, k := range inv.targets {
				out[i] = k.String()
			}
			return out
		}
	}
	return nil
}

// Resolver maps a kind to its resource and scope (a RESTMapper, or a guess from the input).
type Resolver func(gvk schema.GroupVersionKind) (gvr schema.GroupVersionResource, namespaced bool, err error)

// Job is one target compiled for one inventory.
type Job struct {
	Inventory string
	Target    *collector.Target
	// Rollups of the inventory, nil without any.
	Rollups *Rollups
}

// PlanAll is Plan of every inventory, plus the targets no inventory holds, planned under
// inventory "" (their rows belong to no export; a preview still counts them). Without
// inventories in the input it is Plan("").
func (c *Config) PlanAll(resolve Resolver) ([]Job, error) {
	jobs, err := c.Plan("", resolve)
	if len(c.inventories) == 0 {
		return jobs, err
	}
	held := map[collector.TargetKey]bool{}
	for _, inv := range c.inventories {
		for _, k := range inv.targets {
			held[k] = true
		}
	}
	var loose []collector.TargetKey
	for k := range c.targets {
		if !held[k] {
			loose = append(loose, k)
		}
	}
	sort.Slice(loose, func(a, b int) bool { return loose[a].String() < loose[b].String() })
	errs := []error{err}
	for _, k := range loose {
		t, cerr := c.compile(k, resolve)
		if cerr != nil {
			errs = append(errs, cerr)
			continue
		}
		jobs = append(jobs, Job{Target: t})
	}
	return jobs, errors.Join(errs...)
}

// Plan compiles the targets of the chosen inventories. With inventory empty every inventory
// is planned; when the input has no inventory, every target is planned under the name
// inventory (possibly empty), as if one inventory aggregated them all.
func (c *Config) Plan(inventory string, resolve Resolver) ([]Job, error) {
	invs := c.inventories
	if inventory != "" || len(invs) == 0 {
		invs = nil
		for _, i := range c.inventories {
			if i.name == inventory {
				invs = append(invs, i)
			}
		}
		if len(invs) == 0 {
			all := inventoryDef{name: inventory}
			for k := range c.targets {
				all.targets = append(all.targets, k)
			}
			sort.Slice(all.targets, func(a, b int) bool { return all.targets[a].String() < all.targets[b].String() })
			invs = []inventoryDef{all}
		}
	}
	var jobs []Job
	var errs []error
	compiled := map[collector.TargetKey]*collector.Target{}
	for _, inv := range invs {
		for _, k := range inv.targets {
			t, ok := compiled[k]
			if !ok {
				var err error
				if t, err = c.compile(k, resolve); err != nil {
					errs = append(errs, err)
					continue
				}
				compiled[k] = t
			}
			jobs = append(jobs, Job{Inventory: inv.name, Target: t, Rollups: inv.rollups})
		}
	}
	return jobs, errors.Join(errs...)
}

// TargetError is a target that could not be planned: not in the input, its profile missing
// or not compiling, its kind not resolved (Err then satisfies meta.IsNoMatchError when the
// cluster does not serve the kind). Plan joins them; callers that report per target (bundle
// previews) take them apart with errors.As or the joined error's Unwrap.
type TargetError struct {
	Target collector.TargetKey
	// Profile (namespace/name) and GVK, when the target names a profile found in the input.
	Profile string
	GVK     schema.GroupVersionKind
	Err     error
}

func (e *TargetError) Error() string { return fmt.Sprintf("target %s: %v", e.Target, e.Err) }

func (e *TargetError) Unwrap() error { return e.Err }

func (c *Config) compile(k collector.TargetKey, resolve Resolver) (*collector.Target, error) {
	def, ok := c.targets[k]
	if !ok {
		return nil, &TargetError{Target: k, Err: errors.New("not found in the input")}
	}
	p := c.profiles[def.profileRef]
	if p == nil {
		return nil, &TargetError{Target: k, Profile: def.profileRef.String(),
			Err: fmt.Errorf("KollectProfile %s not found in the input", def.profileRef)}
	}
	gvk := schema.GroupVersionKind{Group: p.Spec.Target.Group, Version: p.Spec.Target.Version, Kind: p.Spec.Target.Kind}
	fail := func(err error) error {
		return &TargetError{Target: k, Profile: def.profileRef.String(), GVK: gvk, Err: err}
	}
	prof, err := profile.Compile(p)
	if err != nil {
		return nil, fail(fmt.Errorf("KollectProfile %s: %w", def.profileRef, err))
	}
	gvr, namespaced, err := resolve(gvk)
	if err != nil {
		return nil, fail(err)
	}
	// A profile read from a file has the generation written in it (usually none, 0): the rows
	// say so rather than pretend to the generation the cluster would give it.
	ref := collector.ProfileRef{Key: def.profileRef.String(), Name: def.profileRef.String(), Generation: p.Generation}
	t, err := collector.NewTarget(k, def.selection, gvk, gvr, namespaced, ref, prof)
	if err != nil {
		return nil, fail(err)
	}
	return t, nil
}

// Failure is an object a target selects whose extraction failed; the agent leaves it out of
// the export and reports it on the target.
type Failure struct {
	Target collector.TargetKey
	Object *unstructured.Unstructured
	Err    error
}

// Objects returns the objects of one kind.
type Objects func(gvk schema.GroupVersionKind) []*unstructured.Unstructured

// Rows runs the jobs over the objects and returns each inventory's rows in canonical order
// (inventories sorted by name), stamped with cluster. It is a Stream given every object at once.
func Rows(jobs []Job, cluster string, objects Objects, nsLabels func(string) (labels.Set, bool)) ([]export.Row, []Failure) {
	s := NewStream(jobs, cluster, nsLabels, Hooks{})
	for _, k := range s.Kinds() {
		s.Add(k.GVK, objects(k.GVK))
	}
	return s.Finish()
}

// withRollups adds an inventory's rollup rows to its rows, or puts them in their place with
// rawRows Exclude. Offline every target is complete: each rollup is computed.
func withRollups(r *Rollups, rows []export.Row, cluster, inventory string) []export.Row {
	if r == nil {
		return rows
	}
	var extra []export.Row
	for _, spec := range r.Specs {
		if spec.Targets == nil {
			spec.Targets = r.Targets
		}
		// Compute fails only on attributes that are not a JSON object, which a profile never
		// produces: such a rollup is left out, as nothing could be said of it.
		res, err := rollup.Compute(spec, rows)
		if err != nil {
			continue
		}
		if len(res.Rows) > 0 {
			o := *res.Rows[0].Origin // a rollup's rows share one origin
			o.Cluster, o.Inventory = cluster, inventory
			for i := range res.Rows {
				res.Rows[i].Origin = &o
			}
		}
		extra = append(extra, res.Rows...)
	}
	if r.ExcludeRaw {
		rows = nil
	}
	return append(rows, extra...)
}
