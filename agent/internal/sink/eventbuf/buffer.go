package eventbuf

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

// ErrBufferFull marks an export error after which more events were owed than the buffer
// holds: the pending events were dropped and a marked resync will be sent on recovery. The
// agent reports it as a degraded condition.
var ErrBufferFull = errors.New("event buffer full: pending events dropped, a resync will follow")

// Event is one change owed to the broker.
type Event struct {
	Type export.ChangeType
	// Row is the new row of an upsert or the last exported row of a delete. It points into a
	// snapshot, which is immutable.
	Row *export.Row
	// Key is Row.Key().String(), computed once.
	Key string
	// Resync marks upserts of a full re-send (a buffer overflow, a batch whose relation to
	// what consumers hold is unknown): consumers may see rows they already hold.
	Resync bool
	// ObservedAt is the export time of the batch that produced the event; it is part of the
	// message, so a retried event is byte-identical.
	ObservedAt time.Time
}

// ChangeEvent renders the event in the export contract's shape.
func (e *Event) ChangeEvent() export.ChangeEvent {
	return export.ChangeEvent{SchemaVersion: export.SchemaVersion, Type: e.Type, Cluster: e.Row.Cluster,
		Inventory: e.Row.Inventory, Key: e.Key, Row: e.Row, ObservedAt: e.ObservedAt}
}

// SendFunc delivers events in order and reports which were acknowledged by the broker; a
// non-nil error means some were not. It must return when ctx is done.
type SendFunc func(ctx context.Context, events []Event) (acked []bool, err error)

// Stats are the buffer's metrics.
type Stats struct {
	// Pending is the number of events currently owed, over all inventories (gauge).
	Pending int
	// Overflows counts the times pending events were dropped for a resync (counter).
	Overflows uint64
	// Resyncs counts full re-sends staged (overflows, batches whose relation to what consumers
	// hold is unknown; a sink turns a batch without a baseline into the change from what its
	// broker holds, see Reconcile) (counter).
	Resyncs uint64
	// Delivered counts events acknowledged by the broker (counter).
	Delivered uint64
}

// Buffer is the delivery state of one sink. It is safe for concurrent use, though the
// delivery worker calls a sink from one goroutine.
type Buffer struct {
	limit int

	mu   sync.Mutex
	invs map[invKey]*state

	pending                       atomic.Int64
	overflows, resyncs, delivered atomic.Uint64
}

type invKey struct{ cluster, inventory string }

// state is what is owed for one inventory.
type state struct {
	// base is the checksum consumers are known to hold entirely, "" when unknown.
	base string
	// head is the checksum the pending events lead to.
	head string
	// last identifies the batch staged last, so a retry of it is not staged twice.
	last batchID
	// pending holds one event per key in staging order; index maps a key to its position.
	pending []Event
	index   map[string]int
	// touched holds every key with an event staged since base, with its last row: those keys
	// may have reached consumers in any state and are corrected on a cumulative diff or resync.
	touched map[string]*export.Row
	// acked holds, while some events stay owed, the events acknowledged since base: a later
	// cumulative diff that asks for one of them again sends nothing (consumers hold it).
	acked map[string]Event
	// resync is set after an overflow: the next batch is sent in full.
	resync bool
}

type batchID struct {
	checksum, previous string
	full, resync       bool
}

// New returns a buffer that holds at most limit owed events per inventory after a failure.
func New(limit int) *Buffer {
	if limit <= 0 {
		limit = 100_000
	}
	return &Buffer{limit: limit, invs: map[invKey]*state{}}
}

// Stats returns the current metrics.
func (b *Buffer) Stats() Stats {
	return Stats{Pending: int(b.pending.Load()), Overflows: b.overflows.Load(),
		Resyncs: b.resyncs.Load(), Delivered: b.delivered.Load()}
}

// Export stages the batch and sends everything owed for its inventory. It returns nil when
// the broker acknowledged every event, so the snapshot is durably represented; otherwise a
// transient error (wrapping ErrBufferFull when events had to be dropped) and keeps the rest.
func (b *Buffer) Export(ctx context.Context, batch *sink.Batch, send SendFunc) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := invKey{batch.Envelope.Cluster, batch.Envelope.Inventory}
	st := b.invs[k]
	if st == nil {
		st = &state{index: map[string]int{}, touched: map[string]*export.Row{}}
		b.invs[k] = st
	}
	before := len(st.pending)
	b.stage(st, batch)
	b.pending.Add(int64(len(st.pending) - before))
	if len(st.pending) == 0 {
		st.delivered()
		return nil
	}
	acked, err := send(ctx, st.pending)
	b.settle(st, acked)
	if err == nil && len(st.pending) > 0 {
		err = fmt.Errorf("%d events not acknowledged", len(st.pending))
	}
	if err != nil {
		err = fmt.Errorf("delivering %d events of %s/%s: %w", len(st.pending), k.cluster, k.inventory, err)
		if count := len(st.pending); count > b.limit {
			for i := range st.pending {
				// Dropped events may still reach consumers: what was acknowledged before for
				// their keys is no longer known to be what consumers hold.
				delete(st.acked, st.pending[i].Key)
			}
			b.pending.Add(-int64(count))
			st.pending, st.index = nil, map[string]int{}
			st.resync = true
			b.overflows.Add(1)
			err = fmt.Errorf("%w (%d owed, bufferSize %d): %w", ErrBufferFull, count, b.limit, err)
		}
		return sink.TransientError(err)
	}
	st.delivered()
	return nil
}

// Delivered reports what the buffer knows of an inventory in this process: the checksum
// consumers hold entirely and how many events are still owed on top of it. known is false when
// nothing was staged for the inventory since the process started (or since Forget): then only
// the broker can tell. A sink must not confirm a checksum the buffer knows to be another, nor
// one events are owed on: the broker may hold part of a newer snapshot.
func (b *Buffer) Delivered(cluster, inventory string) (checksum string, owed int, known bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.invs[invKey{cluster, inventory}]
	if st == nil {
		return "", 0, false
	}
	return st.base, len(st.pending), true
}

// Forget drops what the buffer knows of an inventory, owed events included: the sink read
// back what consumers hold, and diffs the next batch against that instead.
func (b *Buffer) Forget(cluster, inventory string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := invKey{cluster, inventory}
	if st := b.invs[k]; st != nil {
		b.pending.Add(-int64(len(st.pending)))
		delete(b.invs, k)
	}
}

// delivered records that consumers hold head. touched is reallocated rather than cleared:
// after a resync it held every key, and a cleared map keeps its buckets.
func (st *state) delivered() {
	st.base = st.head
	st.touched = map[string]*export.Row{}
	st.acked = nil
}

// settle drops acknowledged events from pending. When some stay owed it remembers the
// acknowledged ones (see state.acked); a complete delivery needs no such record.
func (b *Buffer) settle(st *state, acked []bool) {
	n := 0
	for i := range st.pending {
		if i < len(acked) && acked[i] {
			n++
		}
	}
	partial := n < len(st.pending)
	if partial && n > 0 && st.acked == nil {
		st.acked = map[string]Event{}
	}
	kept := st.pending[:0]
	for i := range st.pending {
		if i < len(acked) && acked[i] {
			if partial {
				st.acked[st.pending[i].Key] = st.pending[i]
			}
			continue
		}
		kept = append(kept, st.pending[i])
	}
	clear(st.pending[len(kept):])
	st.pending = kept
	clear(st.index)
	for i := range st.pending {
		st.index[st.pending[i].Key] = i
	}
	b.delivered.Add(uint64(n))
	b.pending.Add(-int64(n))
}

// stage merges the batch into the pending events.
func (b *Buffer) stage(st *state, batch *sink.Batch) {
	id := batchID{batch.Envelope.Checksum, batch.PreviousChecksum, batch.Diff.Full, batch.Resync}
	if st.base == "" && st.head == "" && !batch.Diff.Full {
		// A fresh sink: the delivery worker knows what consumers hold.
		st.base, st.head = batch.PreviousChecksum, batch.PreviousChecksum
	}
	switch {
	case id == st.last && !st.resync:
		// A retry of the batch staged last: what it owes is pending already (or delivered).
		return
	case batch.Resync && !batch.Diff.Full && !st.resync && len(st.pending) == 0 &&
		batch.Envelope.Checksum == st.base && st.head == st.base:
		// A periodic resync of the snapshot consumers hold entirely: nothing is owed, and
		// nothing is written while data is static.
		st.last = id
		return
	case st.resync || batch.Diff.Full:
		// What consumers hold is unknown. A periodic resync while events are owed is not a
		// reason: the buffer knows what they hold (base, and what was acknowledged since), so
		// it is staged as a diff below, and delivering what is owed makes them hold the
		// snapshot. A full marked re-send would come on top of the records a Kafka client
		// still holds from the attempt an outage met, every unchanged row marked twice.
		b.stageResync(st, batch)
	case batch.PreviousChecksum == st.head:
		// Incremental from what is staged: merge.
		b.stageDiff(st, batch, &owed{pending: st.pending, index: st.index, acked: st.acked})
	case batch.PreviousChecksum == st.base:
		// Cumulative from what consumers hold (the delivery worker diffs against the last
		// accepted snapshot): the diff supersedes the pending events, but keys touched since base may
		// have reached consumers, so they are re-sent in their current state.
		b.replaceWithDiff(st, batch)
	default:
		// Neither: the relation to what consumers hold is unknown.
		b.stageResync(st, batch)
	}
	st.last, st.head = id, batch.Envelope.Checksum
}

// owed is what was owed before a batch was staged, so that staging it again is not a change:
// an event owed again with the same content keeps its observedAt (a re-send is byte-identical
// to the first attempt, which lets the broker's client or server recognise it), and an event
// the broker already acknowledged is not sent again.
type owed struct {
	pending []Event
	index   map[string]int
	acked   map[string]Event
}

// repeat returns the event to stage for e: the owed event it repeats, nil when the broker
// acknowledged e's content already, or e itself.
func (o *owed) repeat(e *Event) *Event {
	if o == nil {
		return e
	}
	// An incremental merge shares its index with the staging (stage), which may have put the
	// key at a position past what was owed before: a key twice in one diff (a row whose
	// namespace changed, which the diff reads as a delete and an add).
	if i, ok := o.index[e.Key]; ok && i < len(o.pending) {
		if prev := &o.pending[i]; sameContent(prev, e) {
			return prev
		}
		return e
	}
	// Consumers hold the row whether or not it came with the resync mark.
	if prev, ok := o.acked[e.Key]; ok && prev.Type == e.Type && sameRow(prev.Row, e.Row) {
		return nil
	}
	return e
}

// sameContent reports whether two events of one key say the same thing to consumers.
func sameContent(a, b *Event) bool {
	return a.Type == b.Type && a.Resync == b.Resync && sameRow(a.Row, b.Row)
}

func sameRow(a, b *export.Row) bool {
	return a == b || (a.Cluster == b.Cluster && a.Inventory == b.Inventory && a.Target == b.Target &&
		a.Group == b.Group && a.Version == b.Version && a.Kind == b.Kind && a.Namespace == b.Namespace &&
		a.Name == b.Name && a.UID == b.UID && bytes.Equal(a.Attributes, b.Attributes))
}

// put stages e, one event per key. With prior, an event that repeats what was owed or
// acknowledged before is kept as it was or left out; its key stays touched either way.
func (b *Buffer) put(st *state, e Event, prior *owed) {
	e.Key = e.Row.Key().String()
	st.touched[e.Key] = e.Row
	staged := prior.repeat(&e)
	if staged == nil {
		if i, ok := st.index[e.Key]; ok {
			b.unstage(st, i)
		}
		return
	}
	if i, ok := st.index[e.Key]; ok {
		st.pending[i] = *staged
		return
	}
	st.index[e.Key] = len(st.pending)
	st.pending = append(st.pending, *staged)
}

// unstage removes pending event i, keeping the order of the others.
func (b *Buffer) unstage(st *state, i int) {
	delete(st.index, st.pending[i].Key)
	st.pending = slices.Delete(st.pending, i, i+1)
	for j := i; j < len(st.pending); j++ {
		st.index[st.pending[j].Key] = j
	}
}

func (b *Buffer) stageDiff(st *state, batch *sink.Batch, prior *owed) {
	at := batch.Envelope.ExportedAt
	for _, rows := range [][]export.Row{batch.Diff.Added, batch.Diff.Changed} {
		for i := range rows {
			b.put(st, Event{Type: export.ChangeUpsert, Row: &rows[i], ObservedAt: at}, prior)
		}
	}
	for i := range batch.Diff.Deleted {
		b.put(st, Event{Type: export.ChangeDelete, Row: &batch.Diff.Deleted[i], ObservedAt: at}, prior)
	}
}

func (b *Buffer) replaceWithDiff(st *state, batch *sink.Batch) {
	touched := st.touched
	prior := &owed{pending: st.pending, index: st.index, acked: st.acked}
	st.pending, st.index, st.touched = nil, map[string]int{}, map[string]*export.Row{}
	b.stageDiff(st, batch, prior)
	b.correct(st, batch, touched, false, prior)
}

// stageResync owes every row of the snapshot, marked, and deletes of touched keys that are
// gone.
func (b *Buffer) stageResync(st *state, batch *sink.Batch) {
	b.resyncs.Add(1)
	touched := st.touched
	// Deletes the broker acknowledged are not owed again; upserts are, all of them.
	prior := &owed{pending: st.pending, index: st.index, acked: st.acked}
	st.pending, st.index, st.touched = nil, map[string]int{}, map[string]*export.Row{}
	st.resync = false
	// A resync's upserts all carry its observedAt and its mark, owed before or not: consumers
	// may tell rows it did not mention by that time (see docs/sinks/events.md).
	at := batch.Envelope.ExportedAt
	rows := batch.Envelope.Rows
	for i := range rows {
		b.put(st, Event{Type: export.ChangeUpsert, Row: &rows[i], Resync: true, ObservedAt: at}, nil)
	}
	for i := range batch.Diff.Deleted {
		b.put(st, Event{Type: export.ChangeDelete, Row: &batch.Diff.Deleted[i], ObservedAt: at}, prior)
	}
	b.correct(st, batch, touched, true, prior)
}

// correct stages, for each previously touched key without an event yet, its state in the
// batch's snapshot: an upsert of the current row, or a delete when it is gone.
func (b *Buffer) correct(st *state, batch *sink.Batch, touched map[string]*export.Row, resync bool, prior *owed) {
	keys := make([]string, 0, len(touched))
	for key := range touched {
		if _, ok := st.index[key]; !ok {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys) // deterministic order, so a retry sends the same sequence
	at := batch.Envelope.ExportedAt
	rows := batch.Envelope.Rows
	for _, key := range keys {
		old := touched[key]
		if i, found := slices.BinarySearchFunc(rows, old, func(r export.Row, t *export.Row) int {
			return export.Compare(&r, t)
		}); found && resync {
			b.put(st, Event{Type: export.ChangeUpsert, Row: &rows[i], Resync: true, ObservedAt: at}, nil)
		} else if found {
			b.put(st, Event{Type: export.ChangeUpsert, Row: &rows[i], ObservedAt: at}, prior)
		} else {
			b.put(st, Event{Type: export.ChangeDelete, Row: old, ObservedAt: at}, prior)
		}
	}
}

// Reporter is implemented by sinks that own a Buffer, so Metrics can collect their buffers
// without knowing the sink type.
type Reporter interface {
	BufferStats() Stats
}
