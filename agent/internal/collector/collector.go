package collector

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"

	"kollect.dev/agent/internal/export"
)

// Collector runs the watches of every targeted kind and answers which rows a target selects.
type Collector struct {
	dyn        dynamic.Interface
	meta       metadata.Interface
	builtin    *Builtin
	namespaces []string // the agent's allowed namespaces; empty means all
	nsLabels   func(string) (labels.Set, bool)
	metrics    *Metrics
	log        logr.Logger
	budget     BudgetOptions
	behind     BehindOptions
	coalesce   CoalesceOptions

	mu      sync.Mutex
	ctx     context.Context
	targets map[TargetKey]*Target
	watches map[schema.GroupVersionKind]*gvkWatch
	// pending are the kinds whose watch waits to restart (CoalesceOptions).
	pending map[schema.GroupVersionKind]*pendingRestart
	// budgets are by profile key (namespace/name@generation/uid): they outlive restarts of a
	// watch, so a quarantine ends only with the profile generation (or the process).
	budgets     map[string]*budget
	subs        []func(schema.GroupVersionKind)
	synced      []func([]TargetKey)
	quarantines []func(profile string)
}

// Options configure a Collector.
type Options struct {
	// Namespaces limits every watch to these namespaces (the agent's RBAC scope).
	Namespaces []string
	// Metadata, when set, serves metadata-only watches for kinds whose profiles read only
	// metadata.
	Metadata metadata.Interface
	// Builtin, when set, serves the watches of built-in kinds in protobuf (NewBuiltin).
	Builtin *Builtin
	// NamespaceLabels returns a namespace's labels, for namespaceSelector; nil disables it.
	NamespaceLabels func(string) (labels.Set, bool)
	// Budget holds each profile to a CEL cost budget (see BudgetOptions); the zero value
	// disables budgets.
	Budget BudgetOptions
	// Behind says when a watch is behind (see BehindOptions); a zero Window never says so.
	Behind BehindOptions
	// Coalesce gathers target changes into one restart of a kind's watch (see
	// CoalesceOptions); the zero value is DefaultCoalesce.
	Coalesce CoalesceOptions
	Metrics  *Metrics
	Log      logr.Logger
}

// New returns a collector; Start must be called before targets take effect.
func New(dyn dynamic.Interface, opts Options) *Collector {
	nsLabels := opts.NamespaceLabels
	if nsLabels == nil {
		nsLabels = func(string) (labels.Set, bool) { return nil, false }
	}
	if opts.Coalesce == (CoalesceOptions{}) {
		opts.Coalesce = DefaultCoalesce
	}
	return &Collector{dyn: dyn, meta: opts.Metadata, builtin: opts.Builtin, namespaces: opts.Namespaces, nsLabels: nsLabels, metrics: opts.Metrics, log: opts.Log,
		budget: opts.Budget, behind: opts.Behind, coalesce: opts.Coalesce,
		targets: map[TargetKey]*Target{}, watches: map[schema.GroupVersionKind]*gvkWatch{}, budgets: map[string]*budget{},
		pending: map[schema.GroupVersionKind]*pendingRestart{}}
}

// Start runs watches until ctx ends. It implements controller-runtime's Runnable and does not
// need leader election: a standby keeps its watches warm.
func (c *Collector) Start(ctx context.Context) error {
	c.mu.Lock()
	c.ctx = ctx
	for gvk := range c.watches {
		c.restartNowLocked(gvk)
	}
	c.mu.Unlock()
	<-ctx.Done()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.pending {
		p.timer.Stop()
	}
	for _, w := range c.watches {
		w.stop()
	}
	return nil
}

// NeedLeaderElection is false: every replica collects.
func (c *Collector) NeedLeaderElection() bool { return false }

// Subscribe registers fn to be called (from informer goroutines; it must not block) whenever
// objects of a kind change or its watch starts, stops or fails; its sync is told to
// SubscribeSynced.
func (c *Collector) Subscribe(fn func(schema.GroupVersionKind)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.subs = append(c.subs, fn)
}

// SubscribeSynced registers fn to be called (it must not block) with the targets of a kind
// each time its watch has synced or failed, so that targets report it whether or not an
// inventory uses them, and inventories that have no snapshot yet build one at once.
func (c *Collector) SubscribeSynced(fn func([]TargetKey)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.synced = append(c.synced, fn)
}

// SubscribeQuarantined registers fn to be called (it must not block) with namespace/name of a
// KollectProfile that has just been quarantined.
func (c *Collector) SubscribeQuarantined(fn func(profile string)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.quarantines = append(c.quarantines, fn)
}

// Quarantined reports whether a profile generation (its key, namespace/name@generation/uid) is
// quarantined, with the message saying why.
func (c *Collector) Quarantined(profileKey string) (string, bool) {
	c.mu.Lock()
	b := c.budgets[profileKey]
	c.mu.Unlock()
	return b.quarantined()
}

// quarantined reports a profile a watch's transform has just quarantined.
func (c *Collector) quarantined(gvk schema.GroupVersionKind, profileKey string) {
	name := profileName(profileKey)
	c.metrics.quarantined(name)
	c.log.Info("quarantined a profile over its cost budget", "profile", profileKey, "gvk", gvk.String())
	c.mu.Lock()
	subs := c.quarantines
	c.mu.Unlock()
	go func() {
		c.notify(gvk)
		c.notifyTargets(gvk)
		for _, fn := range subs {
			fn(name)
		}
	}()
}

// budgetForLocked returns a profile generation's budget, creating it full.
func (c *Collector) budgetForLocked(profileKey string) *budget {
	if c.budget.Rate <= 0 {
		return nil
	}
	b := c.budgets[profileKey]
	if b == nil {
		b = newBudget(profileKey, c.budget, time.Now)
		c.budgets[profileKey] = b
	}
	return b
}

// forgetBudgetsLocked drops the budgets of profile generations no target uses any more.
func (c *Collector) forgetBudgetsLocked() {
	used := map[string]bool{}
	for _, t := range c.targets {
		used[t.ProfileKey] = true
	}
	for k := range c.budgets {
		if !used[k] {
			delete(c.budgets, k)
		}
	}
}

func (c *Collector) notifyTargets(gvk schema.GroupVersionKind) {
	c.mu.Lock()
	subs := c.synced
	var keys []TargetKey
	for k, t := range c.targets {
		if t.GVK == gvk {
			keys = append(keys, k)
		}
	}
	c.mu.Unlock()
	for _, fn := range subs {
		fn(keys)
	}
}

func (c *Collector) notify(gvk schema.GroupVersionKind) {
	c.mu.Lock()
	subs := c.subs
	c.mu.Unlock()
	for _, fn := range subs {
		fn(gvk)
	}
}

// SetTarget adds or replaces a target. The kind's watch restarts only when what its transform
// computes changed.
func (c *Collector) SetTarget(t *Target) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.targets[t.Key]
	if old != nil && old.projectionID() == t.projectionID() && old.GVK == t.GVK &&
		equalStrings(old.includeNS, t.includeNS) {
		// Nothing the watch computes changed; reconciles that change nothing must not wake
		// inventories, or status refreshes would loop.
		c.targets[t.Key] = t
		return
	}
	c.targets[t.Key] = t
	if old != nil && old.GVK != t.GVK {
		c.restartLocked(old.GVK)
	}
	c.restartLocked(t.GVK)
}

// RemoveTarget forgets a target and stops its kind's watch when no target needs it.
func (c *Collector) RemoveTarget(key TargetKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old, ok := c.targets[key]
	if !ok {
		return
	}
	delete(c.targets, key)
	c.restartLocked(old.GVK)
}

// NamespacesChanged re-evaluates targets that select namespaces by label (a namespace
// selector, or the Secrets opt-in of secrets.go). A namespace that such a target now selects
// but whose objects the watch did not evaluate (it was refused by its labels when they came)
// restarts the kind's watch, which lists them again.
func (c *Collector) NamespacesChanged() {
	c.mu.Lock()
	gvks := map[schema.GroupVersionKind]bool{}
	for _, t := range c.targets {
		if t.selectsByNamespaceLabels() {
			gvks[t.GVK] = true
		}
	}
	for gvk := range gvks {
		if w := c.watches[gvk]; w != nil && w.nowSelected(c.nsLabels) {
			c.log.Info("a namespace selector selects a namespace the watch did not evaluate: listing again", "gvk", gvk.String())
			c.restartLocked(gvk)
		}
	}
	c.mu.Unlock()
	for gvk := range gvks {
		c.notify(gvk)
	}
}

// restartNowLocked (re)creates the watch of a kind from its current targets, or stops it.
// Callers other than Start and a coalesced restart's timer go through restartLocked.
func (c *Collector) restartNowLocked(gvk schema.GroupVersionKind) {
	var targets []*Target
	for _, t := range c.targets {
		if t.GVK == gvk {
			targets = append(targets, t)
		}
	}
	old := c.watches[gvk]
	if len(targets) == 0 {
		if old != nil {
			old.stop()
			delete(c.watches, gvk)
			c.metrics.forgetGVK(gvk)
			c.log.Info("stopped watch", "gvk", gvk.String())
		}
		go c.notify(gvk)
		return
	}
	c.forgetBudgetsLocked()
	proj := buildProjection(targets, c.namespaces, c.budgetForLocked, c.nsLabels, c.metrics)
	w := newGVKWatch(c.dyn, c.meta, c.builtin, gvk, targets[0].Resource, proj, func() { c.notify(gvk) }, c.metrics, c.behind)
	w.onError = func() { c.notifyTargets(gvk) }
	w.onQuarantine = func(profileKey string) { c.quarantined(gvk, profileKey) }
	c.watches[gvk] = w
	if c.ctx == nil {
		return // started by Start
	}
	if old != nil {
		old.stop()
	}
	c.metrics.started(gvk)
	// A sync is no change of objects: it reaches inventories as a sync (SubscribeSynced), not
	// as a watch change that a build's span would show as its cause.
	w.start(c.ctx, func() { c.notifyTargets(gvk) })
	c.log.Info("started watch", "gvk", gvk.String(), "namespaces", proj.namespaces, "labelSelector", proj.labelSelector.String(),
		"fieldSelector", proj.fieldSelector.String(), "profiles", len(proj.profiles), "metadataOnly", proj.metadataOnly && c.meta != nil)
	go c.notify(gvk)
}

// TargetState is what a target currently selects.
type TargetState struct {
	// Synced is true when the kind's watch holds a complete view.
	Synced bool
	// Err keeps the watch from a complete view (Forbidden, not found, …).
	Err error
	// Forbidden is true when Err says the agent may not list or watch the kind.
	Forbidden bool
	// Quarantined is true when the target's profile is quarantined over its cost budget; Err
	// is the *QuarantineError saying so, and Rows are unknown.
	Quarantined bool
	// Behind, when not empty, says the kind's watch is behind (BehindOptions): the rows are
	// what has been projected so far, and events are waiting.
	Behind string
	// Rows the target selects, with Cluster and Inventory left for the inventory to stamp;
	// Selection leaves them out.
	Rows []export.Row
	// Selected is how many rows the target selects (len(Rows) from Collect).
	Selected int
	// Failed lists objects whose extraction failed, sorted, with the reason.
	Failed []FailedObject
	// MatchFailed lists objects the target's match expression failed on, sorted, with the
	// error. They are not selected: whether they would be is unknown.
	MatchFailed []FailedObject
	// Truncated lists objects exported cut to their profile's fullObject.maxBytes, sorted, with
	// what was cut (a *profile.TruncatedError). They are in Rows and Selected too.
	Truncated []FailedObject
}

// FailedObject is an object a target selects but could not extract.
type FailedObject struct {
	Namespace, Name string
	Err             error
}

// Collect returns the rows a target selects now.
func (c *Collector) Collect(key TargetKey) (TargetState, error) { return c.collect(key, true) }

// Selection is Collect without the rows: how many objects a target selects and which failed,
// as its status reports them, without building a row per object (at 100k objects, a copy of
// every row for each status update).
func (c *Collector) Selection(key TargetKey) (TargetState, error) { return c.collect(key, false) }

func (c *Collector) collect(key TargetKey, withRows bool) (TargetState, error) {
	c.mu.Lock()
	t := c.targets[key]
	var w *gvkWatch
	pending := false
	if t != nil {
		w, pending = c.watches[t.GVK], c.pending[t.GVK] != nil
	}
	c.mu.Unlock()
	if t != nil && w == nil && pending {
		return TargetState{}, nil // the kind's first watch waits for its targets to be quiet: syncing
	}
	if t == nil || w == nil {
		return TargetState{}, fmt.Errorf("target %s is not collected", key)
	}
	var st TargetState
	st.Synced, st.Err = w.state()
	st.Forbidden = st.Err != nil && isForbidden(st.Err)
	if !st.Synced {
		return st, nil
	}
	// The watch may have been built before the target was added or changed (its restart is
	// coalesced, or listing), or for an older profile generation: rows then wait.
	pi, ok := w.proj.profileIndex[t.ProfileKey]
	if !ok || w.proj.ids[t.Key] != t.projectionID() {
		st.Synced = false
		return st, nil
	}
	if msg, q := w.proj.budgets[pi].quarantined(); q {
		st.Quarantined, st.Err = true, &QuarantineError{Profile: profileName(t.ProfileKey), Message: msg}
		return st, nil
	}
	if f, b := w.behind(); b {
		st.Behind = fmt.Sprintf("the watch of %s is behind: its projection was busy %.0f%% of the last %s, so events arrive faster "+
			"than the agent projects them; the rows are those projected so far", t.Resource.Resource, 100*f, w.behindOpts.Window)
	}
	ti, hasMatch := w.proj.targetIndex[t.Key]
	targetName := key.String()
	c.metrics.setObjects(t.GVK, int(w.count.Load()))
	items := w.itemsFor(t)
	if t.Profile.Decode != "" {
		items = latestRevisions(items)
	}
	var origin *export.Origin // every row of the target shares it; the inventory stamps its own
	if withRows {
		st.Rows = make([]export.Row, 0, len(items))
		origin = &export.Origin{Target: targetName, Group: t.GVK.Group, Version: t.GVK.Version, Kind: t.GVK.Kind,
			Profile: t.provenance.Name, ProfileGeneration: t.provenance.Generation}
	}
	for _, it := range items {
		name, uid := rowIdentity(t, it)
		if !t.selectsNamespace(it.namespace, c.nsLabels) || !t.selectsName(name) {
			continue
		}
		if w.proj.keepLabels && !t.labelSelector.Matches(labels.Set(it.labelSet())) {
			continue
		}
		if hasMatch && !it.matched(ti) {
			if err := it.matchErr(ti); err != nil {
				st.MatchFailed = append(st.MatchFailed, FailedObject{Namespace: it.namespace, Name: it.name, Err: err})
			}
			continue
		}
		ex := it.attr(pi)
		if ex.skip != evaluated {
			// Selected now but not when it was projected: its namespace's labels changed,
			// and NamespacesChanged is restarting the watch to evaluate it.
			return TargetState{}, nil
		}
		if ex.err != nil && ex.json == "" {
			st.Failed = append(st.Failed, FailedObject{Namespace: it.namespace, Name: it.name, Err: ex.err})
			continue
		}
		if ex.err != nil { // exported, cut to maxBytes (extraction.err)
			st.Truncated = append(st.Truncated, FailedObject{Namespace: it.namespace, Name: it.name, Err: ex.err})
		}
		st.Selected++
		if withRows {
			st.Rows = append(st.Rows, export.NewRow(origin, it.namespace, name, uid, ex.attributes()))
		}
	}
	sortFailed(st.Failed)
	sortFailed(st.MatchFailed)
	sortFailed(st.Truncated)
	return st, nil
}

func sortFailed(f []FailedObject) {
	sort.Slice(f, func(i, j int) bool {
		a, b := f[i], f[j]
		return a.Namespace < b.Namespace || (a.Namespace == b.Namespace && a.Name < b.Name)
	})
}

// GVKOf returns the kind a target watches.
func (c *Collector) GVKOf(key TargetKey) (schema.GroupVersionKind, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.targets[key]
	if !ok {
		return schema.GroupVersionKind{}, false
	}
	return t.GVK, true
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
