package nats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/eventbuf"
)

// A batch without a baseline (Diff.Full) comes after an agent restart, or when the stream held
// another snapshot than the agent believed. The stream (or the bucket) tells what consumers
// hold, so such a batch is sent as the exact change from it (see baseline): a restart with
// unchanged data publishes nothing, one after changes exactly the changed rows and the
// deletes of rows that went away meanwhile.

// readBack is what the sink read back of one inventory for batches without a baseline. A read
// of the stream is kept across attempts: an export whose deadline ends it leaves it where it
// stopped, and the next attempt goes on from there, so a stream of any length is read in the
// end and no row is skipped (there is no message-count limit).
type readBack struct {
	held eventbuf.Held
	// next is the stream sequence to read from; last the inventory's last message when the
	// read began (messages published later are this agent's own, or come after the read).
	next, last uint64
	read       uint64
	done       bool
	// tail marks a read of the events after the last state message (see readTail): their
	// keys go to held.Uncertain rather than held.Rows.
	tail bool
}

// baseline turns b, a batch without a baseline, into the change from what consumers hold.
// When the inventory's last message on the stream is a state message naming b's snapshot
// (holds), the stream holds it: an empty diff. Otherwise the bucket, or without one the
// stream, is read back, once per inventory until an export succeeds.
func (s *Sink) baseline(ctx context.Context, b *sink.Batch) (*sink.Batch, error) {
	env := &b.Envelope
	inv := env.Cluster + "/" + env.Inventory
	s.mu.Lock()
	rb := s.held[inv]
	s.mu.Unlock()
	if rb == nil {
		ok, err := s.holds(ctx, env)
		if err != nil {
			return nil, err
		}
		if ok {
			s.buf.Forget(env.Cluster, env.Inventory)
			return eventbuf.Holding(b), nil
		}
		rb = &readBack{held: eventbuf.NewHeld(), next: 1}
		s.mu.Lock()
		s.held[inv] = rb
		s.mu.Unlock()
	}
	if !rb.done {
		var err error
		if s.bucket != "" {
			err = s.readBucket(ctx, rb, env.Cluster, env.Inventory)
		} else {
			err = s.readStream(ctx, rb, env.Cluster, env.Inventory)
		}
		if err != nil {
			return nil, err
		}
		// What the buffer knew of the inventory in this process gives way to what the
		// broker holds; the batch is diffed against that.
		s.buf.Forget(env.Cluster, env.Inventory)
	}
	return eventbuf.Reconcile(b, rb.held)
}

// settle forgets the read-back of an inventory once an export succeeded: the buffer knows
// from then on what consumers hold.
func (s *Sink) settle(cluster, inventory string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.held, cluster+"/"+inventory)
}

// inventoryFilter is a subject filter covering every subject of the inventory: the template
// with the cluster's and inventory's tokens and '*' for the others. exact is false when
// {cluster} or {inventory} fills only part of a token, or is missing: the filter then covers
// other inventories' subjects too.
func inventoryFilter(template, cluster, inventory string) (filter string, exact bool) {
	parts := strings.Split(template, ".")
	exact = strings.Contains(template, "{cluster}") && strings.Contains(template, "{inventory}")
	for i, p := range parts {
		switch {
		case p == "{cluster}":
			parts[i] = token(cluster)
		case p == "{inventory}":
			parts[i] = token(inventory)
		case strings.Contains(p, "{cluster}") || strings.Contains(p, "{inventory}"):
			parts[i], exact = "*", false
		case strings.Contains(p, "{"):
			parts[i] = "*"
		}
	}
	return strings.Join(parts, "."), exact
}

// lastOfInventory returns the inventory's last message on the stream (one direct get with a
// wildcard subject), nil when there is none or the template has no exact filter for it.
func (s *Sink) lastOfInventory(ctx context.Context, cluster, inventory string) (*jetstream.RawStreamMsg, error) {
	filter, exact := inventoryFilter(s.template, cluster, inventory)
	if !exact {
		return nil, nil
	}
	st, err := s.js.Stream(ctx, s.stream)
	if err != nil {
		return nil, fmt.Errorf("looking up stream %s: %w", s.stream, s.disconnected(err))
	}
	last, err := st.GetLastMsgForSubject(ctx, filter)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("reading the last message on %s: %w", filter, s.disconnected(err))
	}
	return last, nil
}

// holds reports whether the stream holds env's snapshot and nothing after it: the buffer
// knows of no other snapshot and owes nothing, and the inventory's last message is a state
// message (published only once every event of its snapshot was acknowledged) naming the
// checksum. Events after the last state are of an export that never finished (the agent was
// stopped or failed in the middle of it): then the state is no account of what consumers hold.
// Without {kind} in the template there is no state to tell.
func (s *Sink) holds(ctx context.Context, env *export.Envelope) (bool, error) {
	if sum, owed, known := s.buf.Delivered(env.Cluster, env.Inventory); owed > 0 || known && sum != env.Checksum {
		return false, nil
	}
	subject := s.stateSubject(env.Cluster, env.Inventory)
	if subject == "" {
		return false, nil
	}
	last, err := s.lastOfInventory(ctx, env.Cluster, env.Inventory)
	if err != nil {
		return false, classify(fmt.Errorf("nats sink: reading the state of %s/%s from stream %s: %w", env.Cluster, env.Inventory, s.stream, err))
	}
	if last == nil || last.Subject != subject || last.Header.Get(hEvent) != evState {
		return false, nil
	}
	var rec stateRecord
	if json.Unmarshal(last.Data, &rec) != nil || rec.Checksum != env.Checksum {
		return false, nil
	}
	s.mu.Lock()
	s.states[env.Cluster+"/"+env.Inventory] = heldState{rec: rec, seq: last.Sequence, readAt: time.Now()}
	s.mu.Unlock()
	return true, nil
}

// readBucket reads the bucket's rows of the inventory (a watcher on its keys, the latest
// revision of each, deleted keys left out) into rb.held. The bucket is what consumers of the
// bucket hold; for consumers of the stream, events published after the inventory's last state
// message, of an export that never finished, may have reached the stream and not the bucket
// or the reverse: their keys are uncertain (see eventbuf.Held) and sent again.
func (s *Sink) readBucket(ctx context.Context, rb *readBack, cluster, inventory string) error {
	inv := cluster + "/" + inventory
	rb.held = eventbuf.NewHeld() // a read an earlier attempt left unfinished starts over: one entry per row
	if err := s.readTail(ctx, rb, cluster, inventory); err != nil {
		return err
	}
	kv, err := s.js.KeyValue(ctx, s.bucket)
	if err != nil {
		return classify(fmt.Errorf("nats sink: opening key-value bucket %s: %w", s.bucket, s.disconnected(err)))
	}
	w, err := kv.WatchFiltered(ctx, []string{kvToken(cluster) + "." + kvToken(inventory) + ".>"}, jetstream.IgnoreDeletes())
	if err != nil {
		return classify(fmt.Errorf("nats sink: reading back bucket %s for %s: %w", s.bucket, inv, s.disconnected(err)))
	}
	defer func() { _ = w.Stop() }()
	read := 0
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return sink.TransientError(fmt.Errorf("nats sink: reading back bucket %s for %s: the watcher stopped after %d keys", s.bucket, inv, read))
			}
			if e == nil {
				rb.done = true // every key's latest revision was delivered
				return nil
			}
			read++
			var r export.Row
			if err := json.Unmarshal(e.Value(), &r); err != nil {
				return sink.TerminalError(fmt.Errorf("nats sink: bucket %s key %s does not hold a row: %w", s.bucket, e.Key(), err))
			}
			if r.Cluster == cluster && r.Inventory == inventory { // not another name cleaning to the same key
				rb.held.Rows[r.Key().String()] = e.Value()
			}
		case <-ctx.Done():
			return classify(fmt.Errorf("nats sink: reading back bucket %s for %s, %d keys read: %w", s.bucket, inv, read, ctx.Err()))
		}
	}
}

// readTail marks uncertain the keys of the events published after the inventory's last state
// message. With no state subject or no exact filter there is nothing to tell them by.
func (s *Sink) readTail(ctx context.Context, rb *readBack, cluster, inventory string) error {
	subject := s.stateSubject(cluster, inventory)
	if subject == "" {
		return nil
	}
	last, err := s.lastOfInventory(ctx, cluster, inventory)
	if err != nil {
		return classify(fmt.Errorf("nats sink: reading stream %s for %s/%s: %w", s.stream, cluster, inventory, err))
	}
	if last == nil || last.Subject == subject {
		return nil // nothing after the last state
	}
	_, seq, err := s.lastState(ctx, subject)
	if err != nil {
		return classify(fmt.Errorf("nats sink: reading the state of %s/%s from stream %s: %w", cluster, inventory, s.stream, err))
	}
	tail := &readBack{held: eventbuf.NewHeld(), next: seq + 1, last: last.Sequence, tail: true}
	if err := s.readStream(ctx, tail, cluster, inventory); err != nil {
		return err
	}
	for key, row := range tail.held.Uncertain {
		rb.held.Uncertain[key] = row
	}
	return nil
}

// readStream reads the inventory's messages from rb.next to the last one when the read began
// (an ordered consumer on the inventory's subjects) and keeps in rb.held the latest row of every
// key whose latest event is an upsert (or, for a tail, every key an event names). Messages are
// matched by their Kollect-Cluster and Kollect-Inventory headers.
func (s *Sink) readStream(ctx context.Context, rb *readBack, cluster, inventory string) error {
	inv := cluster + "/" + inventory
	filter, _ := inventoryFilter(s.template, cluster, inventory)
	failed := func(err error) error {
		return classify(fmt.Errorf("nats sink: reading back what stream %s holds of %s, %d messages read (the next attempt goes on from there): %w",
			s.stream, inv, rb.read, err))
	}
	if rb.last == 0 {
		st, err := s.js.Stream(ctx, s.stream)
		if err != nil {
			return failed(s.disconnected(err))
		}
		last, err := st.GetLastMsgForSubject(ctx, filter)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			rb.done = true
			return nil
		} else if err != nil {
			return failed(s.disconnected(err))
		}
		rb.last = last.Sequence
	}
	if rb.next > rb.last {
		rb.done = true
		return nil
	}
	cons, err := s.js.OrderedConsumer(ctx, s.stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter},
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: rb.next})
	if err != nil {
		return failed(s.disconnected(err))
	}
	// The first fetch asks for one message (one at least is there: the last one); the others
	// for what the previous said is pending, so no fetch waits for messages that never come.
	want := 1
	for rb.next <= rb.last {
		if err := ctx.Err(); err != nil {
			return failed(err)
		}
		batch, err := cons.Fetch(want, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return failed(err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			meta, err := m.Metadata()
			if err != nil {
				return failed(err)
			}
			if meta.Sequence.Stream > rb.last {
				rb.next = meta.Sequence.Stream
				break
			}
			rb.next, rb.read = meta.Sequence.Stream+1, rb.read+1
			if err := s.note(rb, m.Headers(), m.Data(), cluster, inventory); err != nil {
				return sink.TerminalError(fmt.Errorf("nats sink: reading back what stream %s holds of %s: message %d: %w",
					s.stream, inv, meta.Sequence.Stream, err))
			}
			want = int(min(max(meta.NumPending, 1), 1000))
			if meta.NumPending == 0 {
				rb.next = rb.last + 1 // nothing more matches
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return failed(err)
		}
		if got == 0 {
			// Messages up to the last may have gone meanwhile (the stream's limits, a
			// purge): then nothing is left to read.
			if gone, err := s.goneFrom(ctx, filter, rb.next); err != nil || !gone {
				return failed(fmt.Errorf("no message arrived from sequence %d, the last being %d (%v)", rb.next, rb.last, err))
			}
			break
		}
	}
	rb.done = true
	return nil
}

// goneFrom reports whether the stream holds no message on filter from sequence from on.
func (s *Sink) goneFrom(ctx context.Context, filter string, from uint64) (bool, error) {
	st, err := s.js.Stream(ctx, s.stream)
	if err != nil {
		return false, s.disconnected(err)
	}
	last, err := st.GetLastMsgForSubject(ctx, filter)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return true, nil
	} else if err != nil {
		return false, s.disconnected(err)
	}
	return last.Sequence < from, nil
}

// note applies one message of the stream to rb.held: state messages and snapshot chunks name
// no row.
func (s *Sink) note(rb *readBack, h nats.Header, data []byte, cluster, inventory string) error {
	ev := export.ChangeType(h.Get(hEvent))
	if h.Get(hCluster) != cluster || h.Get(hInventory) != inventory || ev != export.ChangeUpsert && ev != export.ChangeDelete {
		return nil
	}
	key := h.Get(hKey)
	row, err := eventbuf.RowOf(data) // a delete event carries the last row too
	if err != nil {
		return err
	}
	switch {
	case rb.tail:
		rb.held.Uncertain[key] = row
	case ev == export.ChangeUpsert:
		rb.held.Rows[key] = row
	default:
		delete(rb.held.Rows, key)
	}
	return nil
}
