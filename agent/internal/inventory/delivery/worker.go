package delivery

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/tracing"
)

// Job is one snapshot an inventory wants exported.
type Job struct {
	Snapshot   *export.Snapshot
	Cluster    string
	Inventory  string
	Generation int64
	// Writer is the agent, recorded in the sink's state by exports and confirmations.
	Writer export.Writer
	// Resync forces an export even when the sink holds the checksum already.
	Resync bool
	// Complete says every target of the snapshot is synced and known: only such a snapshot
	// is confirmed (see WorkerOptions.ConfirmInterval).
	Complete bool
	// Coverage is the snapshot's coverage per target, normalized, and CoverageDigest its
	// export.CoverageDigest: a sink is exported to when either the checksum or the digest
	// differs from what it accepted.
	Coverage       []export.Coverage
	CoverageDigest string
	// PurgeState is set for the last export of an inventory deleted with deletionPolicy
	// Delete (an empty snapshot): once a sink that is a sink.Purger accepted it, the worker
	// purges the (cluster, inventory) too, which removes the state record the export left, so
	// a deleted inventory leaves nothing. Only then does the sink count as having accepted
	// the snapshot, so the retirement's finalizer waits for it.
	PurgeState bool
	// Trace is the span of the build that offered the job: the sink write's span is its child.
	Trace trace.SpanContext
}

// settled is the job as the worker keeps it once the sink accepted it: no resync pending.
func (j *Job) settled() *Job {
	c := *j
	c.Resync = false
	return &c
}

// Status is a worker's view of its sink.
type Status struct {
	// Checksum and Rows of the last snapshot the sink accepted.
	Checksum string
	Rows     int
	// Coverage is the digest of the coverage the sink accepted with Checksum.
	Coverage string
	// LastExport is when the sink last accepted a snapshot (zero if never in this process and
	// unknown from status): when its content last changed.
	LastExport time.Time
	// LastConfirm is when the sink was last confirmed to hold the current, complete snapshot:
	// an export, or a confirmation while nothing changed.
	LastConfirm time.Time
	// LastAttempt is when the worker last called the sink, successfully or not.
	LastAttempt time.Time
	// LastError is the last failure, cleared on success.
	LastError string
	// Class of the last failure: sink.Transient or sink.Terminal, or sink.CircuitOpen once
	// transient failures have opened the breaker.
	Class sink.ErrorClass
	// Failures counts consecutive failures; the breaker opens at BreakerThreshold.
	Failures int
	// Conflict is set while another agent writes the same (cluster, inventory) to the sink
	// (two agents run with one --cluster-name); nil once a write meets no conflict.
	Conflict *Conflict
}

// Conflict is a writer conflict the sink reported (sink.WriterConflictError or
// sink.ContendedError). It is never modified once in a Status.
type Conflict struct {
	// Refused: the other agent holds the sink and this one's writes are refused. Otherwise
	// this agent holds it, and the other's writes are refused.
	Refused bool
	// Other is the other agent.
	Other export.Writer
	// Message is the sink's report, naming both agents and what to do.
	Message string
}

// Backoff shapes retries.
type Backoff struct {
	Base, Max time.Duration
	// TerminalDelay is how long a worker waits after a terminal error before trying again
	// anyway (configuration may have been fixed outside Kubernetes, such as a bucket created).
	TerminalDelay time.Duration
	// BreakerThreshold consecutive failures open the breaker: attempts then wait at least
	// BreakerCooldown, one probe at a time.
	BreakerThreshold int
	BreakerCooldown  time.Duration
	// ProbeInterval: while a retry waits longer than this, the worker probes the sink (its
	// cheap connection test) this often and retries at once when the probe passes, so that a
	// sink that comes back after a long outage is caught up within seconds, not at the end of a
	// long backoff. Zero turns probing off.
	ProbeInterval time.Duration
}

// DefaultBackoff is used when a worker is built with a zero Backoff.
var DefaultBackoff = Backoff{Base: time.Second, Max: 5 * time.Minute, TerminalDelay: 10 * time.Minute,
	BreakerThreshold: 5, BreakerCooldown: time.Minute, ProbeInterval: 5 * time.Second}

// Worker exports snapshots of one inventory to one sink.
type Worker struct {
	Name      string // for logs and metrics: family/namespace/name
	sinkType  string // family/type, for spans
	inventory string // namespace/name, for metrics
	sink      sink.Sink
	timeout   time.Duration
	backoff   Backoff
	metrics   *Metrics
	log       logr.Logger
	// onStatus is called after every attempt with the new status; it must not block.
	onStatus func(Status)
	// ready gates exporting (leader election); nil means always ready.
	ready <-chan struct{}
	// confirmEvery is WorkerOptions.ConfirmInterval; nextConfirm is when the next is due.
	confirmEvery time.Duration

	mu       sync.Mutex
	desired  *Job
	wake     chan struct{}
	kick     chan struct{}    // ends a wait to retry (Kick)
	accepted *export.Snapshot // content the sink holds, when known in this process
	status   Status
	// nextConfirm is when the next confirmation is due (zero: not computed yet).
	nextConfirm time.Time
}

// WorkerOptions configure a Worker.
type WorkerOptions struct {
	Name string
	// SinkType is the sink's family/type (database/postgres), an attribute of its spans.
	SinkType string
	// Inventory labels the worker's metrics before its first job (namespace/name).
	Inventory string
	Sink      sink.Sink
	Timeout   time.Duration
	Backoff   Backoff
	Metrics   *Metrics
	Log       logr.Logger
	// Accepted is the checksum the sink accepted before this process started (from status).
	Accepted     string
	AcceptedRows int
	AcceptedAt   time.Time
	// AcceptedCoverage is the digest of the coverage accepted with Accepted (from status).
	AcceptedCoverage string
	// ConfirmedAt is the last confirmation before this process started (from status).
	ConfirmedAt time.Time
	// ConfirmInterval is how often, while nothing changes, the worker confirms that the sink
	// holds the current snapshot (sink.Confirmer, or the sink's connection test); zero never.
	ConfirmInterval time.Duration
	OnStatus        func(Status)
	Ready           <-chan struct{}
}

// NewWorker returns a worker; Run starts it.
func NewWorker(o WorkerOptions) *Worker {
	if o.Backoff == (Backoff{}) {
		o.Backoff = DefaultBackoff
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Minute
	}
	if o.OnStatus == nil {
		o.OnStatus = func(Status) {}
	}
	if o.ConfirmInterval > 0 {
		o.Metrics.initSink(o.Name)
	}
	o.Metrics.confirmInterval(o.Name, o.Inventory, o.ConfirmInterval)
	return &Worker{Name: o.Name, sinkType: o.SinkType, inventory: o.Inventory, sink: o.Sink, timeout: o.Timeout, backoff: o.Backoff, metrics: o.Metrics, log: o.Log,
		onStatus: o.OnStatus, ready: o.Ready, confirmEvery: o.ConfirmInterval, wake: make(chan struct{}, 1), kick: make(chan struct{}, 1),
		status: Status{Checksum: o.Accepted, Rows: o.AcceptedRows, Coverage: o.AcceptedCoverage, LastExport: o.AcceptedAt, LastConfirm: o.ConfirmedAt}}
}

// Offer hands the worker the newest snapshot; an older one not yet exported is replaced.
func (w *Worker) Offer(j *Job) {
	w.mu.Lock()
	if w.desired != nil && w.desired.Resync {
		j.Resync = true // a pending resync is not lost by a newer snapshot
	}
	w.desired = j
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// SetConfirmInterval changes how often the sink is confirmed (the inventory's confirmInterval
// was edited); the next confirmation is due an interval from now.
func (w *Worker) SetConfirmInterval(d time.Duration) {
	w.mu.Lock()
	if d == w.confirmEvery {
		w.mu.Unlock()
		return
	}
	w.confirmEvery, w.nextConfirm = d, time.Time{}
	w.mu.Unlock()
	if d > 0 {
		w.metrics.initSink(w.Name)
	}
	w.metrics.confirmInterval(w.Name, w.inventory, d)
	select {
	case w.wake <- struct{}{}: // recompute the timer
	default:
	}
}

// Kick ends a wait to retry a failed export, so the next attempt is made now: the user asked
// (kollect.dev/resync-now) after fixing what a terminal error or a long backoff waits on.
func (w *Worker) Kick() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Seed sets what the sink is believed to hold from status another replica wrote, as long as
// this worker has not exported itself (a standby taking over).
func (w *Worker) Seed(checksum, coverage string, rows int, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.accepted != nil || w.status.Failures > 0 || checksum == "" {
		return
	}
	w.status.Checksum, w.status.Coverage, w.status.Rows, w.status.LastExport = checksum, coverage, rows, at
}

// Pending reports whether the worker has a snapshot to export that the sink does not hold
// yet and no failed attempt at it: an initial load still on its way.
func (w *Worker) Pending() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	j := w.desired
	if j == nil || w.status.Failures > 0 {
		return false
	}
	return j.Snapshot.Checksum != w.status.Checksum || j.CoverageDigest != w.status.Coverage || j.Resync
}

// Status returns the current status.
func (w *Worker) Status() Status {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.status
}

// Run exports until ctx ends, then closes the sink.
func (w *Worker) Run(ctx context.Context) {
	defer func() {
		if err := w.sink.Close(); err != nil {
			w.log.Error(err, "closing sink", "sink", w.Name)
		}
	}()
	if w.ready != nil {
		select {
		case <-ctx.Done():
			return
		case <-w.ready:
		}
	}
	for {
		confirm, stop := w.confirmTimer()
		select {
		case <-ctx.Done():
			stop()
			return
		case <-confirm:
			w.confirmOnce(ctx)
			continue
		case <-w.wake:
			stop()
		}
		for w.exportOnce(ctx) {
			delay := w.retryDelay()
			w.log.V(1).Info("export failed, retrying", "sink", w.Name, "in", delay.String())
			if !w.waitToRetry(ctx, delay) {
				return
			}
		}
	}
}

// exportOnce exports the desired snapshot if the sink does not hold it; it returns true when
// the attempt failed and must be retried.
func (w *Worker) exportOnce(ctx context.Context) (retry bool) {
	w.mu.Lock()
	job := w.desired
	prevSum, prevCoverage, prevExport := w.status.Checksum, w.status.Coverage, w.status.LastExport
	accepted := w.accepted
	w.mu.Unlock()
	if job == nil || (job.Snapshot.Checksum == prevSum && job.CoverageDigest == prevCoverage && !job.Resync) {
		return false
	}
	if accepted != nil && accepted.Checksum != prevSum {
		accepted = nil
	}
	batch := &sink.Batch{
		Envelope: export.Envelope{
			SchemaVersion: export.SchemaVersion, Cluster: job.Cluster, Inventory: job.Inventory,
			Generation: job.Generation, ExportedAt: time.Now().UTC(), ItemCount: job.Snapshot.Len(),
			Checksum: job.Snapshot.Checksum, Rows: job.Snapshot.Rows, Writer: job.Writer, Coverage: job.Coverage,
		},
		Diff:             export.Compute(accepted, job.Snapshot),
		PreviousChecksum: prevSum,
		Resync:           job.Resync,
		ConflictWindow:   w.conflictWindow(),
	}
	callCtx, cancel := context.WithTimeout(ctx, w.timeout)
	callCtx, span := tracing.Tracer("delivery").Start(trace.ContextWithRemoteSpanContext(callCtx, job.Trace), tracing.SpanExport,
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
			tracing.Inventory.String(job.Inventory), tracing.Sink.String(w.Name), tracing.SinkType.String(w.sinkType),
			tracing.Rows.Int(job.Snapshot.Len()), tracing.RowsChanged.Int(len(batch.Diff.Added)+len(batch.Diff.Changed)+len(batch.Diff.Deleted))))
	start := time.Now()
	err := w.sink.Export(callCtx, batch)
	// A contended export succeeded: the sink holds the batch and reports the other agent.
	conflict, err := conflictOf(err)
	if err == nil && conflict == nil && job.PurgeState {
		// Never after a contended export: the other agent's state is not this one's to purge.
		err = w.purgeState(callCtx, job)
	}
	if err != nil {
		// The message the sink's status shows: sink errors never carry credentials or rows.
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(attribute.String("kollect.error.class", string(sink.ClassOf(err))))
	}
	span.End()
	cancel()
	w.metrics.observe(w.Name, job.Inventory, time.Since(start), err)
	w.metrics.writerConflict(w.Name, job.Inventory, conflict != nil)
	if err != nil && ctx.Err() != nil {
		return false // shutting down; the next process resumes from status
	}
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("export did not finish within %s: %w", w.timeout, err)
	}

	w.mu.Lock()
	if err == nil {
		w.accepted = job.Snapshot
		w.status = Status{Checksum: job.Snapshot.Checksum, Rows: job.Snapshot.Len(), Coverage: job.CoverageDigest,
			LastExport: batch.Envelope.ExportedAt, LastAttempt: start, LastConfirm: w.status.LastConfirm}
		if job.Snapshot.Checksum == prevSum && !job.Resync && !prevExport.IsZero() {
			// Only the coverage changed: the rows did not, and neither did their change time.
			w.status.LastExport = prevExport
		}
		if job.Complete {
			w.status.LastConfirm = batch.Envelope.ExportedAt
			w.nextConfirm = time.Now().Add(w.confirmEvery)
		}
		if w.desired == job {
			w.desired = job.settled()
		}
		w.status.Conflict = conflict
		w.metrics.success(w.Name, job.Inventory, batch.Envelope.ExportedAt, job.Snapshot.Len(), job.Complete)
	} else {
		// A refusal keeps the accepted checksum: the sink still holds whatever it held.
		w.status.LastError = err.Error()
		w.status.Class = sink.ClassOf(err)
		w.status.LastAttempt = start
		w.status.Conflict = conflict
		w.status.Failures++
		if w.status.Class == sink.Transient && w.status.Failures >= w.backoff.BreakerThreshold {
			w.status.Class = sink.CircuitOpen
		}
	}
	st := w.status
	w.mu.Unlock()
	w.onStatus(st)
	if conflict != nil && err == nil {
		w.log.Error(errors.New(conflict.Message), "another agent writes the same cluster and inventory to the sink", "sink", w.Name,
			"inventory", job.Inventory, "other", conflict.Other.Instance)
	}
	if err != nil {
		// Error level: this is the line an operator greps for when a sink is behind.
		w.log.Error(err, "export failed", "sink", w.Name, "inventory", job.Inventory, "class", st.Class, "failures", st.Failures)
	}
	return err != nil
}

// purgeState removes the state a deletionPolicy Delete's empty export left in a sink that is
// a sink.Purger (see Job.PurgeState); other sinks keep nothing of an empty snapshot to remove
// or cannot remove it (git keeps history by design).
func (w *Worker) purgeState(ctx context.Context, job *Job) error {
	p, ok := w.sink.(sink.Purger)
	if !ok {
		return nil
	}
	if _, err := p.Purge(ctx, job.Cluster, job.Inventory, time.Time{}); err != nil {
		return fmt.Errorf("the empty snapshot was exported, but removing the inventory's state record failed: %w", err)
	}
	return nil
}

// confirmTimer fires when the next confirmation is due; without an interval it never fires.
func (w *Worker) confirmTimer() (<-chan time.Time, func()) {
	if w.confirmEvery <= 0 {
		return nil, func() {}
	}
	w.mu.Lock()
	if w.nextConfirm.IsZero() {
		w.nextConfirm = time.Now().Add(w.confirmEvery)
		if last := w.status.LastConfirm; !last.IsZero() && last.Add(w.confirmEvery).Before(w.nextConfirm) {
			w.nextConfirm = last.Add(w.confirmEvery) // due from the last one, also across a restart
		}
	}
	wait := time.Until(w.nextConfirm)
	w.mu.Unlock()
	t := time.NewTimer(max(wait, 0))
	return t.C, func() { t.Stop() }
}

// firstConfirmRetry is how soon a confirmation due before the first snapshot is tried again.
const firstConfirmRetry = 5 * time.Second

// confirmOnce confirms that the sink holds the desired snapshot, when it is complete and the
// sink accepted it: through sink.Confirmer (one small state write), else through the sink's
// connection test. A sink that holds another snapshot is exported to again, in full. Whatever
// the outcome, the next confirmation is due an interval later.
func (w *Worker) confirmOnce(ctx context.Context) {
	w.mu.Lock()
	job, st := w.desired, w.status
	w.nextConfirm = time.Now().Add(w.confirmEvery)
	if job == nil {
		// No snapshot yet (a restart whose watches are still listing): try again soon, so a
		// restart does not cost a whole interval of freshness.
		w.nextConfirm = time.Now().Add(min(w.confirmEvery, firstConfirmRetry))
	}
	w.mu.Unlock()
	if job == nil || !job.Complete || st.Checksum == "" || job.Snapshot.Checksum != st.Checksum || job.CoverageDigest != st.Coverage {
		// Nothing current to confirm: the watches are syncing, a target is unknown, or a
		// change waits for its export. Freshness ages, as it should.
		return
	}
	cctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	at := time.Now().UTC()
	var err error
	if c, ok := w.sink.(sink.Confirmer); ok {
		err = c.Confirm(cctx, sink.Confirmation{Cluster: job.Cluster, Inventory: job.Inventory, Checksum: st.Checksum, At: at, Writer: job.Writer,
			Coverage: job.Coverage, ConflictWindow: w.conflictWindow()})
	} else {
		err = w.sink.Probe(cctx)
	}
	conflict, err := conflictOf(err)
	if ctx.Err() == nil {
		w.metrics.writerConflict(w.Name, job.Inventory, conflict != nil)
	}
	switch {
	case ctx.Err() != nil:
		return
	case conflict != nil && conflict.Refused:
		// The sink holds another agent's snapshot now (it took over while this one was away,
		// or both run): keep the accepted checksum and try again at the next interval.
		w.metrics.confirmation(w.Name, job.Inventory, failed, at)
		w.log.Error(err, "confirming the sink refused: another agent writes the same cluster and inventory", "sink", w.Name,
			"inventory", job.Inventory, "other", conflict.Other.Instance)
		w.mu.Lock()
		w.status.Conflict, w.status.LastError, w.status.Class, w.status.LastAttempt = conflict, err.Error(), sink.ClassOf(err), at
		st = w.status
		w.mu.Unlock()
		w.onStatus(st)
		return
	case errors.Is(err, sink.ErrNotHeld):
		w.metrics.confirmation(w.Name, job.Inventory, notHeld, at)
		w.log.Info("the sink holds another snapshot than the one it accepted: exporting again in full", "sink", w.Name,
			"inventory", job.Inventory, "reason", err.Error())
		w.mu.Lock()
		w.status.Checksum, w.status.Coverage, w.accepted = "", "", nil
		w.mu.Unlock()
		select {
		case w.wake <- struct{}{}:
		default:
		}
		return
	case err != nil:
		w.metrics.confirmation(w.Name, job.Inventory, failed, at)
		w.log.Info("confirming the sink failed; its freshness ages until it answers", "sink", w.Name,
			"inventory", job.Inventory, "error", err.Error())
		return
	}
	w.metrics.confirmation(w.Name, job.Inventory, confirmed, at)
	if conflict != nil {
		w.log.Error(errors.New(conflict.Message), "another agent writes the same cluster and inventory to the sink", "sink", w.Name,
			"inventory", job.Inventory, "other", conflict.Other.Instance)
	}
	w.mu.Lock()
	w.status.LastConfirm = at
	w.status.Conflict = conflict
	if st.Conflict != nil && st.Conflict.Refused {
		// This agent holds the sink again: the refusal is over.
		w.status.LastError, w.status.Class, w.status.Failures = "", "", 0
	}
	st = w.status
	w.mu.Unlock()
	w.onStatus(st)
}

// conflictWindow is how long the sink is held for this agent after its last write.
func (w *Worker) conflictWindow() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return sink.ConflictWindow(w.confirmEvery)
}

// conflictRetry is how long a refused worker waits: a confirm interval, the holder's rhythm
// (the window when confirmations are off).
func (w *Worker) conflictRetry() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.confirmEvery > 0 {
		return w.confirmEvery
	}
	return sink.DefaultConflictWindow
}

// conflictOf splits a sink call's result: a *sink.ContendedError is a success (nil error) with
// a conflict to report, a *sink.WriterConflictError a failure with a conflict.
func conflictOf(err error) (*Conflict, error) {
	var contended *sink.ContendedError
	if errors.As(err, &contended) {
		return &Conflict{Other: contended.Contender, Message: err.Error()}, nil
	}
	var refused *sink.WriterConflictError
	if errors.As(err, &refused) {
		return &Conflict{Refused: true, Other: refused.Holder, Message: err.Error()}, err
	}
	return nil, err
}

// refused reports whether the last attempt was refused by a writer conflict.
func (w *Worker) refused() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.status.Conflict != nil && w.status.Conflict.Refused
}
