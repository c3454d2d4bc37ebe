package collector

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"

	"kollect.dev/agent/internal/profile"
)

// projection is the frozen configuration of a kind's watch.
type projection struct {
	profiles     map[string]*profile.Compiled
	profileKeys  []string       // position → profile key
	profileIndex map[string]int // profile key → position (item.attr)
	// budgets and counters are by profile position; budgets outlive the watch (Collector).
	budgets  []*budget
	counters []*profileCounters
	// targets are every target of the kind; targetProfile and targetObject give, by position,
	// its profile's position and its position in objectTargets (-1 when it has none).
	targets       []*Target
	ids           map[TargetKey]string // each target's projectionID when the watch was built
	targetProfile []int
	targetObject  []int
	// targetsByNamespace gives, by namespace, the positions of the targets that name it
	// (plainNamespaces); targetsAnyNamespace those of the others.
	targetsByNamespace  map[string][]int
	targetsAnyNamespace []int
	// nsLabels returns a namespace's labels for namespace selectors at projection time.
	nsLabels func(string) (labels.Set, bool)
	// objectTargets need the whole object at projection time; targetIndex gives each one's
	// position in item.matches.
	objectTargets []*Target
	targetIndex   map[TargetKey]int
	keepLabels    bool
	// metadataOnly watches object metadata only: every profile reads only metadata and no
	// target needs the whole object.
	metadataOnly bool
	// decodes is true when a profile decodes objects (decodeFor); decodeValues when one of
	// them asks for values.
	decodes, decodeValues bool
	// server-side selectors, when every target agrees.
	labelSelector labels.Selector
	fieldSelector fields.Selector
	namespaces    []string // "" means all namespaces
}

// gvkWatch is the running watch of one kind: one informer per namespace set entry.
type gvkWatch struct {
	gvk       schema.GroupVersionKind
	gvr       schema.GroupVersionResource
	proj      *projection
	informers []cache.SharedIndexInformer
	// handlersSynced say when each informer's handler has been handed every object of the
	// initial list, which trails the store's own sync: the watch counts as synced only then,
	// so the list's last events are not taken for changes after the sync (and count is whole).
	handlersSynced []cache.InformerSynced
	cancel         context.CancelFunc
	// metadataWatch is true when the informers list and watch object metadata only.
	metadataWatch bool

	mu      sync.Mutex
	lastErr error
	errAt   time.Time
	eventAt time.Time

	// deniedNS are namespaces a namespace selector refused at projection time (guarded by mu).
	deniedNS map[string]bool

	synced atomic.Bool
	// count is how many items the informers hold (adds less deletes).
	count atomic.Int64
	// kick coalesces the events of the informers into calls of onEvent (changed).
	kick chan struct{}
	// onError, when set before start, is also called on a watch error, so that targets can
	// report it even when no inventory rebuilds for it.
	onError func()
	// onQuarantine, when set before start, is called (from a transform; it must not block)
	// with the key of a profile this watch's transform quarantined.
	onQuarantine func(profileKey string)
	// onEvent tells inventories the watch changed; meters measure each informer's transform.
	onEvent    func()
	meters     []*busyMeter
	behindOpts BehindOptions
	waking     atomic.Bool
	ctx        context.Context
}

func newGVKWatch(dyn dynamic.Interface, meta metadata.Interface, builtin *Builtin, gvk schema.GroupVersionKind,
	gvr schema.GroupVersionResource, proj *projection, onEvent func(), metrics *Metrics, behind BehindOptions) *gvkWatch {
	w := &gvkWatch{gvk: gvk, gvr: gvr, proj: proj, onEvent: onEvent, behindOpts: behind, ctx: context.Background(),
		kick: make(chan struct{}, 1)}
	tweak := func(o *metav1.ListOptions) {
		if !proj.labelSelector.Empty() {
			o.LabelSelector = proj.labelSelector.String()
		}
		if !proj.fieldSelector.Empty() {
			o.FieldSelector = proj.fieldSelector.String()
		}
	}
	for _, ns := range proj.namespaces {
		var src source
		if proj.metadataOnly && meta != nil {
			// Every profile reads only metadata: the API server sends no spec or status.
			client := meta.Resource(gvr).Namespace(ns)
			src = source{obj: &metav1.PartialObjectMetadata{}, watch: client.Watch,
				list: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return client.List(ctx, o) }}
			w.metadataWatch = true
		} else if typed, ok := builtin.source(gvk, gvr, ns); ok {
			src = typed // a built-in kind, as protobuf: the transform converts it
		} else {
			client := dyn.Resource(gvr).Namespace(ns)
			src = source{obj: &unstructured.Unstructured{}, watch: client.Watch,
				list: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return client.List(ctx, o) }}
		}
		lw := &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				tweak(&o)
				countList(metrics, gvk, o)
				return src.list(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				tweak(&o)
				countList(metrics, gvk, o)
				return src.watch(ctx, o)
			},
		}
		inf := cache.NewSharedIndexInformer(lw, src.obj, 0, cache.Indexers{namespaceIndex: itemNamespace})
		m := newBusyMeter(behind, time.Now)
		w.meters = append(w.meters, m)
		_ = inf.SetTransform(w.timed(m, w.transform(metrics)))
		_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
			w.mu.Lock()
			w.lastErr, w.errAt = err, time.Now()
			w.mu.Unlock()
			onEvent() // let inventories and targets report the error
			if w.onError != nil {
				w.onError()
			}
		})
		handler := func(any) {
			w.mu.Lock()
			w.eventAt = time.Now()
			w.mu.Unlock()
			w.changed()
		}
		reg, _ := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { w.count.Add(1); handler(obj) },
			UpdateFunc: func(_, obj any) { handler(obj) },
			DeleteFunc: func(obj any) { w.count.Add(-1); handler(obj) },
		})
		w.informers = append(w.informers, inf)
		w.handlersSynced = append(w.handlersSynced, reg.HasSynced)
	}
	return w
}

// source lists and watches one kind in one namespace, in the encoding the informer then
// decodes into obj's type.
type source struct {
	list  func(context.Context, metav1.ListOptions) (runtime.Object, error)
	watch func(context.Context, metav1.ListOptions) (watch.Interface, error)
	obj   runtime.Object
}

// countList counts a list of the kind: a LIST request (its first page), or a watch that
// starts with every object (sendInitialEvents, client-go's streaming watch-list, which the
// reflector prefers when the API server offers it). A plain watch lists nothing.
func countList(m *Metrics, gvk schema.GroupVersionKind, o metav1.ListOptions) {
	if o.Watch && (o.SendInitialEvents == nil || !*o.SendInitialEvents) {
		return
	}
	if !o.Watch && o.Continue != "" {
		return // a page of a list is not another list
	}
	m.listed(gvk)
}

func (w *gvkWatch) start(ctx context.Context, onSynced func()) {
	ctx, w.cancel = context.WithCancel(ctx)
	w.ctx = ctx
	for _, inf := range w.informers {
		go inf.RunWithContext(ctx)
	}
	go w.deliver(ctx)
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), w.handlersSynced...) {
			w.synced.Store(true)
			w.mu.Lock()
			w.lastErr = nil
			w.mu.Unlock()
			onSynced()
		}
	}()
}

func (w *gvkWatch) stop() {
	if w.cancel != nil {
		w.cancel()
	}
}

// state reports whether the watch holds a complete view and the error that keeps it from one.
func (w *gvkWatch) state() (synced bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	err = w.lastErr
	if err != nil && w.synced.Load() && w.eventAt.After(w.errAt) {
		err = nil // the watch recovered after the error
	}
	return w.synced.Load(), err
}

// forbidden reports whether the agent may not list or watch the kind.
func isForbidden(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err)
}

// transform projects an object into an item. It runs once per object version, in the
// informer, so the full object never reaches the store.
func (w *gvkWatch) transform(metrics *Metrics) cache.TransformFunc {
	proj := w.proj
	return func(obj any) (any, error) {
		var u *unstructured.Unstructured
		switch o := obj.(type) {
		case *unstructured.Unstructured:
			u = o
		case *metav1.PartialObjectMetadata:
			content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
			if err != nil {
				return nil, err
			}
			u = &unstructured.Unstructured{Object: content}
		case *item:
			return obj, nil // already projected
		case runtime.Object: // a built-in kind decoded from protobuf (Builtin)
			var err error
			if u, err = toUnstructured(o, w.gvk); err != nil {
				return nil, err
			}
		default:
			return obj, nil // tombstones carry stored items
		}
		content := u.UnstructuredContent()
		it := newItem(u.GetNamespace(), u.GetName(), string(u.GetUID()))
		if proj.keepLabels {
			if l := u.GetLabels(); len(l) > 0 {
				it.more().labels = l
			}
		}
		w.project(it, content, proj.decodeFor(it, content))
		if metrics != nil && w.synced.Load() {
			metrics.observeLag(w.gvk, u)
		}
		return it, nil
	}
}

// items returns every stored item of the kind, across its informers.
func (w *gvkWatch) items() []*item {
	var out []*item
	for _, inf := range w.informers {
		for _, o := range inf.GetStore().List() {
			if it, ok := o.(*item); ok {
				out = append(out, it)
			}
		}
	}
	return out
}

// buildProjection derives a kind's watch configuration from its targets.
// budgetFor returns a profile's budget (nil: none); nsLabels serves namespace selectors.
func buildProjection(targets []*Target, agentNamespaces []string, budgetFor func(profileKey string) *budget,
	nsLabels func(string) (labels.Set, bool), metrics *Metrics) *projection {
	p := &projection{profiles: map[string]*profile.Compiled{}, profileIndex: map[string]int{}, targetIndex: map[TargetKey]int{},
		ids:           map[TargetKey]string{},
		labelSelector: labels.Everything(), fieldSelector: fields.Everything(), nsLabels: nsLabels}
	sort.Slice(targets, func(i, j int) bool { return targets[i].Key.String() < targets[j].Key.String() })
	sameLabels, sameFields := true, true
	for i, t := range targets {
		if _, ok := p.profiles[t.ProfileKey]; !ok {
			p.profileIndex[t.ProfileKey] = len(p.profileKeys)
			p.profileKeys = append(p.profileKeys, t.ProfileKey)
		}
		p.profiles[t.ProfileKey] = t.Profile
		if i > 0 {
			sameLabels = sameLabels && t.labelSelector.String() == targets[0].labelSelector.String()
			sameFields = sameFields && t.fieldSelector.String() == targets[0].fieldSelector.String()
		}
	}
	if len(targets) > 0 && sameLabels {
		p.labelSelector = targets[0].labelSelector
	}
	if len(targets) > 0 && sameFields {
		p.fieldSelector = targets[0].fieldSelector
	}
	for _, t := range targets {
		if !sameLabels && t.needsLabels() {
			p.keepLabels = true
		}
		oi := -1
		if t.match != nil || (!sameFields && !t.fieldSelector.Empty()) {
			oi = len(p.objectTargets)
			p.targetIndex[t.Key] = oi
			p.objectTargets = append(p.objectTargets, t)
		}
		p.targets = append(p.targets, t)
		p.ids[t.Key] = t.projectionID()
		p.targetProfile = append(p.targetProfile, p.profileIndex[t.ProfileKey])
		p.targetObject = append(p.targetObject, oi)
		if nss, ok := t.plainNamespaces(); ok {
			if p.targetsByNamespace == nil {
				p.targetsByNamespace = map[string][]int{}
			}
			for _, ns := range nss {
				p.targetsByNamespace[ns] = append(p.targetsByNamespace[ns], len(p.targets)-1)
			}
		} else {
			p.targetsAnyNamespace = append(p.targetsAnyNamespace, len(p.targets)-1)
		}
	}
	for _, key := range p.profileKeys {
		var b *budget
		if budgetFor != nil {
			b = budgetFor(key)
		}
		p.budgets = append(p.budgets, b)
		p.counters = append(p.counters, metrics.forProfile(profileName(key)))
	}
	p.metadataOnly = len(p.objectTargets) == 0
	for _, prof := range p.profiles {
		p.metadataOnly = p.metadataOnly && prof.MetadataOnly
		p.decodes = p.decodes || prof.Decode != ""
		p.decodeValues = p.decodeValues || prof.DecodeValues
	}
	p.namespaces = watchNamespaces(targets, agentNamespaces)
	return p
}

// watchNamespaces picks per-namespace watches when every target names plain namespaces (or
// the agent is limited to some), and one cluster-wide watch otherwise.
func watchNamespaces(targets []*Target, agentNamespaces []string) []string {
	if len(targets) > 0 && !targets[0].Namespaced {
		return []string{""}
	}
	if len(agentNamespaces) > 0 {
		return agentNamespaces
	}
	set := map[string]bool{}
	for _, t := range targets {
		if !t.Namespaced || len(t.includeNS) == 0 || t.nsSelector != nil {
			return []string{""}
		}
		for _, ns := range t.includeNS {
			if hasGlob(ns) {
				return []string{""}
			}
			set[ns] = true
		}
	}
	// Beyond a handful of namespaces one cluster-wide watch is cheaper than many.
	if len(set) == 0 || len(set) > 8 {
		return []string{""}
	}
	out := make([]string, 0, len(set))
	for ns := range set {
		out = append(out, ns)
	}
	sort.Strings(out)
	return out
}

func hasGlob(s string) bool {
	for _, c := range s {
		if c == '*' || c == '?' || c == '[' {
			return true
		}
	}
	return false
}
