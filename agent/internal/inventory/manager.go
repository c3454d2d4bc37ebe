package inventory

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"kollect.dev/agent/internal/collector"
	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/inventory/delivery"
)

// Manager runs every inventory of the agent.
type Manager struct {
	cluster string
	writer  export.Writer
	col     *collector.Collector
	ready   <-chan struct{}
	metrics *delivery.Metrics
	// coverage records each inventory's coverage as metrics.
	coverage *Metrics
	log      logr.Logger
	backoff  delivery.Backoff
	store    lastStore
	// onStatus is called (without blocking) when an inventory's status may have changed;
	// onTargets when the listed targets' counts may have changed.
	onStatus  func(Key)
	onTargets func([]collector.TargetKey)
	// builds admits GOMAXPROCS snapshot builds at a time. Every inventory of a kind becomes
	// due at the same moment when its watch syncs; a build is CPU work, so building them all
	// at once finishes no sooner and holds every build's rows and encodings at the same time
	// (at 100k objects in 10 inventories, most of the first export's peak).
	builds chan struct{}

	mu   sync.Mutex
	ctx  context.Context
	invs map[Key]*runner
	// bindings remembers the binding ID per (inventory, sink) seen in this process, so a sink
	// rebuilt with a new configuration exports again instead of trusting the old checksum.
	// It has its own lock: runners consult it while the manager's lock is held.
	bindingsMu sync.Mutex
	bindings   map[string]string
	// lastGVK remembers the kind each target watched (guarded by mu). When a target leaves the
	// collector (its profile now names a kind the cluster does not serve), the collector's
	// notification for the old kind is the inventory's only cue to rebuild and report it.
	lastGVK map[collector.TargetKey]schema.GroupVersionKind
	// goMu guards stopped and the Add side of running: Start waits for every goroutine of
	// its runners and workers (exports in flight) before returning, and none may begin once
	// it has started waiting. An agent that loses its leader lease relies on this: its next
	// term campaigns only after the old term's exports have stopped.
	goMu    sync.Mutex
	stopped bool
	running sync.WaitGroup
}

// Options configure a Manager.
type Options struct {
	// Cluster is stamped on every row.
	Cluster string
	// Writer is this agent, recorded in every sink's state.
	Writer export.Writer
	// Ready gates exports (the leader-election channel); nil exports at once.
	Ready     <-chan struct{}
	Metrics   *delivery.Metrics
	Coverage  *Metrics
	Log       logr.Logger
	Backoff   delivery.Backoff
	OnStatus  func(Key)
	OnTargets func([]collector.TargetKey)
	// StateDir keeps each inventory's last snapshot across restarts (see lastStore); "" keeps
	// nothing.
	StateDir string
}

// NewManager returns a manager fed by col.
func NewManager(col *collector.Collector, o Options) *Manager {
	m := &Manager{cluster: o.Cluster, writer: o.Writer, col: col, ready: o.Ready, metrics: o.Metrics, coverage: o.Coverage, log: o.Log, backoff: o.Backoff,
		store: lastStore{dir: o.StateDir}, onStatus: o.OnStatus, onTargets: o.OnTargets, invs: map[Key]*runner{}, bindings: map[string]string{},
		lastGVK: map[collector.TargetKey]schema.GroupVersionKind{}, builds: make(chan struct{}, runtime.GOMAXPROCS(0))}
	if m.onStatus == nil {
		m.onStatus = func(Key) {}
	}
	if m.onTargets == nil {
		m.onTargets = func([]collector.TargetKey) {}
	}
	col.Subscribe(m.kindChanged)
	col.SubscribeSynced(m.targetsSynced)
	return m
}

// targetsSynced tells the inventories of these targets that a watch synced or failed.
func (m *Manager) targetsSynced(keys []collector.TargetKey) {
	synced := make(map[collector.TargetKey]bool, len(keys))
	for _, k := range keys {
		synced[k] = true
	}
	m.mu.Lock()
	var runners []*runner
	for _, r := range m.invs {
		for _, t := range r.targets() {
			if synced[t] {
				runners = append(runners, r)
				break
			}
		}
	}
	m.mu.Unlock()
	for _, r := range runners {
		r.markSynced()
	}
}

// Start runs inventories until ctx ends; it needs no leader election (snapshots stay warm on
// a standby, exports wait for Ready).
func (m *Manager) Start(ctx context.Context) error {
	m.mu.Lock()
	m.ctx = ctx
	for _, r := range m.invs {
		r.start(ctx)
	}
	m.mu.Unlock()
	<-ctx.Done()
	m.goMu.Lock()
	m.stopped = true
	m.goMu.Unlock()
	m.running.Wait()
	return nil
}

// goTracked runs f in a goroutine Start waits for; after Start has begun waiting it runs
// nothing (the context f would get is done anyway).
func (m *Manager) goTracked(f func()) {
	m.goMu.Lock()
	defer m.goMu.Unlock()
	if m.stopped {
		return
	}
	m.running.Go(f)
}

// NeedLeaderElection is false; see Start.
func (m *Manager) NeedLeaderElection() bool { return false }

// Apply creates or updates an inventory.
func (m *Manager) Apply(cfg Config) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.invs[cfg.Key]
	if r == nil {
		r = &runner{m: m, key: cfg.Key, dirty: make(chan bool, 1), workers: map[SinkRef]*workerHandle{}}
		m.invs[cfg.Key] = r
		r.setConfig(cfg)
		if m.ctx != nil {
			r.start(m.ctx)
		}
		r.markDirty(false)
		return
	}
	// Status updates re-apply the same configuration; only a real change rebuilds.
	if r.setConfig(cfg) {
		r.markDirty(false)
	}
}

// Remove stops an inventory and its workers.
func (m *Manager) Remove(key Key) {
	m.mu.Lock()
	r := m.invs[key]
	delete(m.invs, key)
	m.mu.Unlock()
	m.bindingsMu.Lock()
	for id := range m.bindings {
		if strings.HasPrefix(id, key.String()+"|") {
			delete(m.bindings, id)
		}
	}
	m.bindingsMu.Unlock()
	if r != nil {
		r.stop()
	}
	m.coverage.forget(key.String())
	m.store.remove(key)
}

// Resync asks an inventory for an immediate resync of every sink: a worker waiting to retry a
// failed export (a terminal error's delay, a long backoff) tries again now, and the next
// snapshot is offered as a resync.
func (m *Manager) Resync(key Key) {
	m.mu.Lock()
	r := m.invs[key]
	m.mu.Unlock()
	if r != nil {
		r.kickWorkers()
		r.markDirty(true)
	}
}

// Status returns an inventory's current status.
func (m *Manager) Status(key Key) (Status, bool) {
	m.mu.Lock()
	r := m.invs[key]
	m.mu.Unlock()
	if r == nil {
		return Status{}, false
	}
	return r.status(), true
}

// Settled reports whether the initial load is over: every inventory has built a snapshot (or
// holds its export for a reason other than a watch still listing), and no sink has an export
// of it pending. A sink whose export failed is not pending: it waits to retry. The agent
// hands the initial load's garbage back to the kernel once this holds.
func (m *Manager) Settled() bool {
	m.mu.Lock()
	runners := make([]*runner, 0, len(m.invs))
	for _, r := range m.invs {
		runners = append(runners, r)
	}
	m.mu.Unlock()
	for _, r := range runners {
		if !r.settled() {
			return false
		}
	}
	return true
}

// kindChanged marks every inventory with a target of that kind dirty.
func (m *Manager) kindChanged(gvk schema.GroupVersionKind) {
	m.mu.Lock()
	var dirty []*runner
	for _, r := range m.invs {
		for _, t := range r.targets() {
			g, ok := m.col.GVKOf(t)
			if ok {
				m.lastGVK[t] = g
			} else if g, ok = m.lastGVK[t]; ok {
				delete(m.lastGVK, t) // removed from the collector: rebuild once, then forget
			}
			if ok && g == gvk {
				dirty = append(dirty, r)
				break
			}
		}
	}
	m.mu.Unlock()
	for _, r := range dirty {
		r.markChanged(gvk.String())
	}
}

// bindingChanged records a binding and reports whether the sink was configured differently
// earlier in this process.
func (m *Manager) bindingChanged(key Key, b SinkBinding) bool {
	m.bindingsMu.Lock()
	defer m.bindingsMu.Unlock()
	id := key.String() + "|" + b.Ref.String()
	prev, seen := m.bindings[id]
	m.bindings[id] = b.ID
	return seen && prev != b.ID
}

// Status is an inventory's observable state.
type Status struct {
	Generation int64
	ItemCount  int
	Checksum   string
	Targets    int
	// Built is false until a first complete snapshot exists.
	Built bool
	// Held: the export waits because a target's rows are unknown and no earlier rows of it
	// exist, in memory or in the state directory.
	Held bool
	// CarriedFrom is when the stored snapshot that the unknown targets' rows come from was
	// built; zero when they come from this process's own last snapshot.
	CarriedFrom time.Time
	// Incomplete lists targets whose rows are carried over or missing, with the reason.
	Incomplete []TargetProblem
	// Coverage is the last snapshot's coverage per target, sorted by target.
	Coverage []export.Coverage
	// Failed counts objects whose extraction failed, per target.
	Failed map[collector.TargetKey]int
	// Behind lists targets whose watch is behind (collector.BehindOptions): their rows are
	// exported as far as they are projected, but events are waiting.
	Behind []TargetProblem
	Sinks  []SinkStatus
	// Retire is the progress of a deleted inventory's last export; nil unless it retires.
	Retire *RetireProgress
}

// TargetProblem explains why a target's rows are not current.
type TargetProblem struct {
	Target    collector.TargetKey
	Forbidden bool
	// Quarantined: the target's profile is quarantined over its cost budget.
	Quarantined bool
	// Syncing: the target's watch has not synced yet and reported no error; this clears by
	// itself (kollectv1.ReasonTargetsSyncing), unlike the other problems.
	Syncing bool
	// NotServed: the target's kind is no longer served (its CRD was deleted after the watch
	// synced); its rows are unknown until the kind is served again or the target removed.
	NotServed bool
	Reason    string
}

// SinkStatus is one sink's export state.
type SinkStatus struct {
	Ref SinkRef
	delivery.Status
}

func (p TargetProblem) String() string { return fmt.Sprintf("%s: %s", p.Target, p.Reason) }

func sortSinks(s []SinkStatus) {
	sort.Slice(s, func(i, j int) bool { return s[i].Ref.String() < s[j].Ref.String() })
}

// rowsOfTarget returns a target's rows from a snapshot, for carrying them over.
func rowsOfTarget(s *export.Snapshot, target string) []export.Row {
	if s == nil {
		return nil
	}
	var out []export.Row
	for _, r := range s.Rows {
		if r.Target == target {
			out = append(out, r)
		}
	}
	return out
}
