package eventbuf

import (
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
	// Resync marks upserts of a full re-send (restart with an unknown baseline, buffer
	// overflow, periodic resync): consumers may see rows they already hold.
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
	// Resyncs counts full re-sends staged (restarts, overflows, periodic resyncs) (counter).
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
		if owed := len(st.pending); owed > b.limit {
			b.pending.Add(-int64(owed))
			st.pending, st.index = nil, map[string]int{}
			st.resync = true
			b.overflows.Add(1)
			err = fmt.Errorf("%w (%d owed, bufferSize %d): %w", ErrBufferFull, owed, b.limit, err)
		}
		return sink.TransientError(err)
	}
	st.delivered()
	return nil
}

// delivered records that consumers hold head. touched is reallocated rather than cleared:
// after a resync it held every key, and a cleared map keeps its buckets.
func (st *state) delivered() {
	st.base = st.head
	st.touched = map[string]*export.Row{}
}

// settle drops acknowledged events from pending.
func (b *Buffer) settle(st *state, acked []bool) {
	kept := st.pending[:0]
	n := 0
	for i := range st.pending {
		if i < len(acked) && acked[i] {
			n++
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
	case st.resync || batch.Diff.Full || batch.Resync:
		b.stageResync(st, batch)
	case batch.PreviousChecksum == st.head:
		// Incremental from what is staged: merge.
		b.stageDiff(st, batch)
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

func (b *Buffer) put(st *state, e Event) {
	e.Key = e.Row.Key().String()
	st.touched[e.Key] = e.Row
	if i, ok := st.index[e.Key]; ok {
		st.pending[i] = e
		return
	}
	st.index[e.Key] = len(st.pending)
	st.pending = append(st.pending, e)
}

func (b *Buffer) stageDiff(st *state, batch *sink.Batch) {
	at := batch.Envelope.ExportedAt
	for _, rows := range [][]export.Row{batch.Diff.Added, batch.Diff.Changed} {
		for i := range rows {
			b.put(st, Event{Type: export.ChangeUpsert, Row: &rows[i], ObservedAt: at})
		}
	}
	for i := range batch.Diff.Deleted {
		b.put(st, Event{Type: export.ChangeDelete, Row: &batch.Diff.Deleted[i], ObservedAt: at})
	}
}

func (b *Buffer) replaceWithDiff(st *state, batch *sink.Batch) {
	touched := st.touched
	st.pending, st.index, st.touched = nil, map[string]int{}, map[string]*export.Row{}
	b.stageDiff(st, batch)
	b.correct(st, batch, touched, false)
}

// stageResync owes every row of the snapshot, marked, and deletes of touched keys that are
// gone.
func (b *Buffer) stageResync(st *state, batch *sink.Batch) {
	b.resyncs.Add(1)
	touched := st.touched
	st.pending, st.index, st.touched = nil, map[string]int{}, map[string]*export.Row{}
	st.resync = false
	at := batch.Envelope.ExportedAt
	rows := batch.Envelope.Rows
	for i := range rows {
		b.put(st, Event{Type: export.ChangeUpsert, Row: &rows[i], Resync: true, ObservedAt: at})
	}
	for i := range batch.Diff.Deleted {
		b.put(st, Event{Type: export.ChangeDelete, Row: &batch.Diff.Deleted[i], ObservedAt: at})
	}
	b.correct(st, batch, touched, true)
}

// correct stages, for each previously touched key without an event yet, its state in the
// batch's snapshot: an upsert of the current row, or a delete when it is gone.
func (b *Buffer) correct(st *state, batch *sink.Batch, touched map[string]*export.Row, resync bool) {
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
		}); found {
			b.put(st, Event{Type: export.ChangeUpsert, Row: &rows[i], Resync: resync, ObservedAt: at})
		} else {
			b.put(st, Event{Type: export.ChangeDelete, Row: old, ObservedAt: at})
		}
	}
}

// Reporter is implemented by sinks that own a Buffer, so Metrics can collect their buffers
// without knowing the sink type.
type Reporter interface {
	BufferStats() Stats
}
