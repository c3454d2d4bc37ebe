package inventory

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"kollect.dev/agent/internal/collector"
	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/inventory/delivery"
	"kollect.dev/agent/internal/inventory/rollup"
	"kollect.dev/agent/internal/tracing"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// runner is one inventory: its debounce loop, its last snapshot and its sink workers.
type runner struct {
	m     *Manager
	key   Key
	dirty chan bool // true requests a resync

	mu      sync.Mutex
	cfg     Config
	cancel  context.CancelFunc
	ctx     context.Context
	last    *export.Snapshot
	st      Status
	workers map[SinkRef]*workerHandle
	resync  bool
	// complete says the last snapshot had every target synced and known: it may be confirmed.
	complete bool
	// coverage of the last snapshot, and its digest.
	coverage       []export.Coverage
	coverageDigest string
	// stored is the snapshot the state directory held when this process first needed earlier
	// rows (loaded once, only while r.last is nil), and storedAt when it was built.
	stored       *export.Snapshot
	storedAt     time.Time
	storedLoaded bool
	// retireBuilt: r.last was built by the retiring configuration (see retire.go).
	retireBuilt bool
	// changedKind and changedAt are the first watch change since the last build, recorded
	// as an event of the build's span.
	changedKind string
	changedAt   time.Time
	// synced: a watch of one of the targets synced (or failed) since the loop last looked.
	synced bool
}

type workerHandle struct {
	id          string
	credentials string
	w           *delivery.Worker
	cancel      context.CancelFunc
}

func (r *runner) targets() []collector.TargetKey {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cfg.Targets
}

// setConfig applies cfg and reports whether the snapshot may differ (other targets, a new
// generation) or sinks changed.
func (r *runner) setConfig(cfg Config) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	changed := !sameConfig(r.cfg, cfg)
	r.cfg = cfg
	r.st.Generation = cfg.Generation
	r.st.Targets = len(cfg.Targets)
	if r.ctx != nil {
		r.syncWorkersLocked()
	}
	return changed
}

func sameConfig(a, b Config) bool {
	if a.Generation != b.Generation || a.Suspend != b.Suspend || a.Retire != b.Retire || len(a.Targets) != len(b.Targets) || len(a.Sinks) != len(b.Sinks) ||
		!maps.Equal(a.Notes, b.Notes) || !maps.Equal(a.Denied, b.Denied) || a.ExcludeRaw != b.ExcludeRaw ||
		!slices.EqualFunc(a.Rollups, b.Rollups, rollup.Spec.Equal) {
		return false
	}
	for i := range a.Targets {
		if a.Targets[i] != b.Targets[i] {
			return false
		}
	}
	for i := range a.Sinks {
		if a.Sinks[i].Ref != b.Sinks[i].Ref || a.Sinks[i].ID != b.Sinks[i].ID || a.Sinks[i].Credentials != b.Sinks[i].Credentials {
			return false
		}
	}
	return true
}

func (r *runner) start(ctx context.Context) {
	r.mu.Lock()
	r.ctx, r.cancel = context.WithCancel(ctx)
	r.syncWorkersLocked()
	r.mu.Unlock()
	r.m.goTracked(r.loop)
}

func (r *runner) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancel != nil {
		r.cancel()
	}
}

// syncWorkersLocked starts, replaces and stops workers to match the configured sinks.
func (r *runner) syncWorkersLocked() {
	want := map[SinkRef]SinkBinding{}
	for _, b := range r.cfg.Sinks {
		want[b.Ref] = b
	}
	for ref, h := range r.workers {
		if b, ok := want[ref]; !ok || b.ID != h.id || b.Credentials != h.credentials {
			h.cancel()
			delete(r.workers, ref)
		}
	}
	for ref, b := range want {
		if h, ok := r.workers[ref]; ok {
			h.w.Seed(b.Accepted, b.AcceptedCoverage, b.AcceptedRows, b.AcceptedAt)
			h.w.SetConfirmInterval(r.cfg.Confirm)
			continue
		}
		accepted, coverage, rows, at, confirmed := b.Accepted, b.AcceptedCoverage, b.AcceptedRows, b.AcceptedAt, b.ConfirmedAt
		if r.m.bindingChanged(r.key, b) {
			// New configuration: the new destination holds nothing.
			accepted, coverage, rows, at, confirmed = "", "", 0, time.Time{}, time.Time{}
		}
		w := delivery.NewWorker(delivery.WorkerOptions{
			Name: ref.String(), SinkType: b.Type, Inventory: r.cfg.Key.String(), Sink: b.Sink, Timeout: b.Timeout, Backoff: r.m.backoff, Metrics: r.m.metrics,
			Log: r.m.log, Accepted: accepted, AcceptedCoverage: coverage, AcceptedRows: rows, AcceptedAt: at, Ready: r.m.ready,
			ConfirmedAt: confirmed, ConfirmInterval: r.cfg.Confirm,
			OnStatus: func(delivery.Status) { r.m.onStatus(r.key) },
		})
		ctx, cancel := context.WithCancel(r.ctx)
		r.workers[ref] = &workerHandle{id: b.ID, credentials: b.Credentials, w: w, cancel: cancel}
		r.m.goTracked(func() { w.Run(ctx) })
		if r.last != nil && r.exporting() {
			w.Offer(r.job(false))
		}
	}
}

func (r *runner) kickWorkers() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range r.workers {
		h.w.Kick()
	}
}

// markChanged records a watch change of kind and marks the inventory dirty.
func (r *runner) markChanged(kind string) {
	r.mu.Lock()
	if r.changedAt.IsZero() {
		r.changedKind, r.changedAt = kind, time.Now()
	}
	r.mu.Unlock()
	r.markDirty(false)
}

// markSynced marks the inventory dirty because a watch of one of its targets synced or
// failed: the first snapshot then does not wait for the debounce (see loop).
func (r *runner) markSynced() {
	r.mu.Lock()
	r.synced = true
	r.mu.Unlock()
	r.markDirty(false)
}

func (r *runner) markDirty(resync bool) {
	if resync {
		r.mu.Lock()
		r.resync = true
		r.mu.Unlock()
	}
	select {
	case r.dirty <- true:
	default:
	}
}

// loop is the trailing debounce: a change schedules a build debounce after it, but never later
// than maxDelay after the first change not yet built. The debounce spaces exports and gathers
// a burst of changes into one; before the first snapshot there is nothing to space, and a
// watch's sync is no burst but the moment the rows are known, so an inventory that has built
// no snapshot yet builds at once when a watch of its targets syncs (at an agent's start,
// every inventory of the kind at that moment). Other changes before then still wait.
func (r *runner) loop() {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var first time.Time
	var resyncC <-chan time.Time
	// firstSync: the pending build is the first snapshot, after a sync; changes until it runs
	// do not postpone it.
	firstSync := false
	for {
		r.mu.Lock()
		cfg, ctx := r.cfg, r.ctx
		r.mu.Unlock()
		if cfg.Resync > 0 && resyncC == nil {
			resyncC = time.After(cfg.Resync)
		}
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-r.dirty:
			now := time.Now()
			if first.IsZero() {
				first = now
			}
			due := now.Add(cfg.Debounce)
			r.mu.Lock()
			firstSync = firstSync || r.synced && r.last == nil
			r.synced = false
			r.mu.Unlock()
			if cfg.Retire != "" || firstSync {
				// A deleted inventory is held until it retires: no reason to wait either.
				due = now
			}
			if limit := first.Add(cfg.MaxDelay); cfg.MaxDelay > 0 && due.After(limit) {
				due = limit
			}
			timer.Reset(time.Until(due))
		case <-resyncC:
			resyncC = nil
			r.markDirty(true)
		case <-timer.C:
			first, firstSync = time.Time{}, false
			select {
			case r.m.builds <- struct{}{}:
			case <-ctx.Done():
				return
			}
			r.build()
			<-r.m.builds
		}
	}
}

// build assembles the snapshot from the targets and offers it to the workers if it changed.
func (r *runner) build() {
	r.mu.Lock()
	cfg := r.cfg
	prev := r.last
	resync := r.resync
	r.resync = false
	changedKind, changedAt := r.changedKind, r.changedAt
	r.changedKind, r.changedAt = "", time.Time{}
	spanCtx := r.ctx
	r.mu.Unlock()
	// The build's span parents the sink writes it offers (Job.Trace): one trace per change.
	_, span := tracing.Tracer("inventory").Start(spanCtx, tracing.SpanBuild, trace.WithAttributes(
		tracing.Inventory.String(cfg.Key.String()), tracing.Targets.Int(len(cfg.Targets))))
	defer span.End()
	if !changedAt.IsZero() {
		span.AddEvent(tracing.EventChange, trace.WithTimestamp(changedAt), trace.WithAttributes(tracing.Kind.String(changedKind)))
	}

	var rows []export.Row
	var incomplete []TargetProblem
	var unknown []collector.TargetKey
	var behind []TargetProblem
	syncing := false
	failed := map[collector.TargetKey]int{}
	// uncollected are the targets the collector does not collect (see heldDeparted).
	uncollected := map[string]bool{}
	coverage := make([]export.Coverage, 0, len(cfg.Targets)+len(cfg.Denied))
	for _, tk := range cfg.Targets {
		st, err := r.m.col.Collect(tk)
		var p TargetProblem
		switch {
		case err != nil:
			p = TargetProblem{Target: tk, Reason: err.Error()}
			uncollected[tk.String()] = true
		case st.Forbidden:
			p = TargetProblem{Target: tk, Forbidden: true, Reason: st.Err.Error()}
		case st.Quarantined:
			// Its profile is no longer evaluated: its rows are unknown, not empty.
			p = TargetProblem{Target: tk, Quarantined: true, Reason: st.Err.Error()}
		case !st.Synced:
			p = TargetProblem{Target: tk, Syncing: true, Reason: "waiting for the watch to sync"}
			if st.Err != nil {
				p.Syncing, p.Reason = false, st.Err.Error()
			}
			syncing = syncing || p.Syncing
		case st.Err != nil && apierrors.IsNotFound(st.Err):
			// A synced watch whose list now fails NotFound: the kind is no longer served. What
			// the watch holds is its last view, not the cluster's, as its target reports
			// (KindNotFound).
			p = TargetProblem{Target: tk, NotServed: true, Reason: "the API server no longer serves the kind: " + st.Err.Error()}
		default:
			if rows == nil {
				rows = st.Rows // Collect's slice is the build's own: no copy of the first target's rows
			} else {
				rows = append(rows, st.Rows...)
			}
			failed[tk] = len(st.Failed)
			if st.Behind != "" {
				behind = append(behind, TargetProblem{Target: tk, Reason: st.Behind})
			}
			coverage = append(coverage, export.Coverage{Target: tk.String(), State: kollectv1.CoverageComplete,
				Rows: int64(len(st.Rows)), ExtractionErrors: int64(len(st.Failed))})
			continue
		}
		incomplete = append(incomplete, p)
		unknown = append(unknown, tk)
		coverage = append(coverage, unknownCoverage(p, cfg.Notes))
	}
	for tk, note := range cfg.Denied {
		coverage = append(coverage, export.Coverage{Target: tk.String(), State: note.State, Reason: note.Reason})
	}
	// A target whose rows are unknown keeps the rows it had: from this process's last
	// snapshot, or after a restart from the one the state directory kept. With neither, the
	// export holds: leaving the rows out would delete them from the sinks. A first snapshot
	// also waits for the watches still listing, which sync by themselves, rather than export
	// stored rows that the next build replaces.
	from, holdExport, carriedFrom := prev, false, time.Time{}
	if prev == nil && len(unknown) > 0 {
		if holdExport = syncing; !holdExport {
			from, carriedFrom = r.storedSnapshot()
			holdExport = from == nil
		}
	}
	kept := map[string]int64{}
	for _, tk := range unknown {
		carried := rowsOfTarget(from, tk.String())
		rows = append(rows, carried...)
		kept[tk.String()] = int64(len(carried))
	}
	var unresolved []string
	for i := range coverage {
		if n, ok := kept[coverage[i].Target]; ok {
			coverage[i].Rows = n
		}
		if uncollected[coverage[i].Target] && unresolvedTarget(coverage[i]) {
			unresolved = append(unresolved, coverage[i].Target)
		}
	}
	// A target that left the inventory while it names one it cannot resolve keeps its rows: a
	// rename to a missing name is not a removal (departed.go).
	heldRows, heldCoverage, heldProblems := heldDeparted(cfg, from, unresolved)
	rows, coverage, incomplete = append(rows, heldRows...), append(coverage, heldCoverage...), append(incomplete, heldProblems...)
	rows, coverage, rollupProblems := withRollups(cfg, rows, coverage, from)
	incomplete = append(incomplete, rollupProblems...)
	if cfg.Retire != "" {
		rows, coverage = retiredContent(cfg.Retire, prev, rows, coverage)
		incomplete, holdExport = nil, holdExport && cfg.Retire == kollectv1.DeletionRetain
	}
	coverage = export.NormalizeCoverage(coverage)
	coverageDigest := export.CoverageDigest(coverage)
	name := cfg.Key.String()
	stampOrigins(rows, r.m.cluster, name)
	r.m.onTargets(cfg.Targets)

	r.mu.Lock()
	r.st.Incomplete, r.st.Failed, r.st.Held, r.st.Behind, r.st.Coverage = incomplete, failed, holdExport, behind, coverage
	if len(unknown) == 0 {
		r.st.CarriedFrom = time.Time{}
	} else if prev == nil {
		r.st.CarriedFrom = carriedFrom
	}
	if holdExport {
		// A resync asked for meanwhile (kollect.dev/resync-now, already recorded in status as
		// acted on) is made by the first build that exports, not dropped with this one.
		r.resync = r.resync || resync
		r.mu.Unlock()
		span.SetAttributes(tracing.Rows.Int(len(rows)), attribute.Bool("kollect.held", true))
		r.m.onStatus(r.key)
		return
	}
	snap := export.NewSnapshot(rows)
	span.SetAttributes(tracing.Rows.Int(snap.Len()))
	changed := prev == nil || snap.Checksum != prev.Checksum
	if changed {
		r.last = snap
	}
	// A retired inventory's data is no longer kept current: nothing confirms it.
	complete := len(incomplete) == 0 && cfg.Retire == ""
	completeness := complete != r.complete // the workers must stop (or may start) confirming
	coverageChanged := coverageDigest != r.coverageDigest
	r.complete, r.coverage, r.coverageDigest = complete, coverage, coverageDigest
	if coverageChanged && r.ctx.Err() == nil { // a removed inventory keeps no series
		r.m.coverage.setCoverage(name, coverage)
	}
	r.stored = nil // r.last holds whatever it carried over from now on
	r.retireBuilt = cfg.Retire != ""
	r.st.Built, r.st.ItemCount, r.st.Checksum = true, r.last.Len(), r.last.Checksum
	var offer []*delivery.Worker
	if (changed || resync || completeness || coverageChanged) && (!cfg.Suspend || cfg.Retire != "") {
		for _, h := range r.workers {
			offer = append(offer, h.w)
		}
	}
	job := r.job(resync)
	if len(offer) > 0 {
		job.Trace = span.SpanContext()
	}
	ctx := r.ctx
	r.mu.Unlock()

	for _, w := range offer {
		w.Offer(job)
	}
	r.m.onStatus(r.key)
	if changed && ctx.Err() == nil { // a removed inventory's file is gone and stays gone
		if err := r.m.store.save(r.key, snap, time.Now()); err != nil {
			r.m.log.Error(err, "keeping the last snapshot in the state directory", "inventory", name)
		}
	}
}

// settled reports whether the inventory has built (or holds for a reason that does not clear
// by itself) and no worker has an export pending; see Manager.Settled.
func (r *runner) settled() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.cfg.Suspend && r.cfg.Retire == "":
		return true
	case r.last == nil && !r.st.Held:
		return false // not built yet
	}
	for _, p := range r.st.Incomplete {
		if p.Syncing {
			return false
		}
	}
	for _, h := range r.workers {
		if h.w.Pending() {
			return false
		}
	}
	return true
}

// stampOrigins gives every row the cluster and inventory. Rows share origins (a target's
// rows one), so an origin that says otherwise is replaced by one copy per origin, never
// changed: the last snapshot's rows, which sinks may be reading, keep theirs.
func stampOrigins(rows []export.Row, cluster, inventory string) {
	stamped := map[*export.Origin]*export.Origin{}
	for i := range rows {
		o := rows[i].Origin
		if o != nil && o.Cluster == cluster && o.Inventory == inventory {
			continue
		}
		n, ok := stamped[o]
		if !ok {
			c := export.Origin{}
			if o != nil {
				c = *o
			}
			c.Cluster, c.Inventory = cluster, inventory
			n = &c
			stamped[o] = n
		}
		rows[i].Origin = n
	}
}

// storedSnapshot loads the state directory's snapshot of the inventory once per process.
func (r *runner) storedSnapshot() (*export.Snapshot, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.storedLoaded {
		r.storedLoaded = true
		snap, at, err := r.m.store.load(r.key)
		if err != nil {
			r.m.log.Error(err, "reading the last snapshot from the state directory", "inventory", r.key.String())
		}
		r.stored, r.storedAt = snap, at
	}
	return r.stored, r.storedAt
}

// exporting reports whether snapshots go to the workers: not while suspended, unless the
// inventory is retiring (its deletion policy is applied even so).
func (r *runner) exporting() bool { return !r.cfg.Suspend || r.cfg.Retire != "" }

func (r *runner) job(resync bool) *delivery.Job {
	return &delivery.Job{Snapshot: r.last, Cluster: r.m.cluster, Inventory: r.cfg.Key.String(), Generation: r.cfg.Generation, Resync: resync, Writer: r.m.writer,
		Complete: r.complete, Coverage: r.coverage, CoverageDigest: r.coverageDigest,
		PurgeState: r.cfg.Retire == kollectv1.DeletionDelete && r.retireBuilt}
}

func (r *runner) status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.st
	st.Sinks = nil
	for ref, h := range r.workers {
		st.Sinks = append(st.Sinks, SinkStatus{Ref: ref, Status: h.w.Status()})
	}
	sortSinks(st.Sinks)
	st.Retire = r.retireProgressLocked(st.Sinks)
	return st
}

// unknownCoverage is the coverage of a target whose rows are not known now: what the collector
// said, or what the controller knows of a target the collector does not collect.
func unknownCoverage(p TargetProblem, notes map[collector.TargetKey]TargetNote) export.Coverage {
	c := export.Coverage{Target: p.Target.String(), State: kollectv1.CoverageFailed, Reason: p.Reason}
	switch {
	case p.Forbidden:
		c.State = kollectv1.CoverageForbidden
	case p.Syncing:
		c.State = kollectv1.CoverageSyncing
	case p.NotServed:
		c.State = kollectv1.CoverageKindNotServed
	case p.Quarantined:
	default:
		if n, ok := notes[p.Target]; ok {
			c.State, c.Reason = n.State, n.Reason
		}
	}
	return c
}
