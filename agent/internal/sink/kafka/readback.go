package kafka

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/eventbuf"
)

// A batch without a baseline (Diff.Full) comes after an agent restart, or when the topic held
// another snapshot than the agent believed. The topic itself tells what consumers hold, so
// such a batch is sent as the exact change from it (see baseline): a restart with unchanged
// data produces nothing, one after changes produces exactly the changed rows and the deletes
// of rows that went away meanwhile.

// readBack is a read of the whole topic for what consumers hold of one inventory. It is kept
// across attempts: an export whose deadline ends the read leaves it where it stopped, and the
// next attempt goes on from there, so a topic of any size is read in the end and no row is
// skipped (there is no record-count limit).
type readBack struct {
	// from is, per partition still to read, the next offset; until the end offset when the
	// read began (records produced later are this agent's own or come after the read).
	from, until map[int32]int64
	held        eventbuf.Held
	read, total int64
	done        bool
}

// baseline turns b, a batch without a baseline, into the change from what consumers hold.
// When the latest state record names b's snapshot and nothing of the inventory was produced
// after it (holds), the topic holds the snapshot: an empty diff. Otherwise the topic is read
// back (readBack), once per inventory until an export succeeds.
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
		rb = &readBack{}
		s.mu.Lock()
		s.held[inv] = rb
		s.mu.Unlock()
	}
	if !rb.done {
		if err := s.readBack(ctx, rb, env.Cluster, env.Inventory); err != nil {
			return nil, err
		}
		// What the buffer knew of the inventory in this process gives way to what the
		// topic holds; the batch is diffed against that.
		s.buf.Forget(env.Cluster, env.Inventory)
	}
	return eventbuf.Reconcile(b, rb.held)
}

// settle forgets the read-back of an inventory once an export succeeded: the buffer knows
// from then on what consumers hold, and the latest state record is this process's own.
func (s *Sink) settle(cluster, inventory string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.held, cluster+"/"+inventory)
	s.verified[cluster+"/"+inventory] = true
}

// holds reports whether the topic holds env's snapshot and nothing after it: the buffer knows
// of no other snapshot and owes nothing, the latest state record names the checksum (it is
// produced only once every event of its snapshot was acknowledged), and no record of the
// inventory was produced after it (see quietSince).
func (s *Sink) holds(ctx context.Context, env *export.Envelope) (bool, error) {
	if sum, owed, known := s.buf.Delivered(env.Cluster, env.Inventory); owed > 0 || known && sum != env.Checksum {
		return false, nil
	}
	held, err := s.readState(ctx, env.Cluster, env.Inventory)
	if err != nil {
		return false, classify(fmt.Errorf("kafka sink: reading the state of %s/%s in %s: %w", env.Cluster, env.Inventory, s.topic, err))
	}
	if held == nil || held.rec.Checksum != env.Checksum {
		return false, nil
	}
	return s.quietSince(ctx, env.Cluster, env.Inventory, held)
}

// quietSince reports whether no record of the inventory but a state record was produced after
// held, the latest state record: records of an export that never finished (the agent was
// stopped or failed in the middle of it) make the state record no account of what consumers
// hold. The topic is read for that once per inventory and process (producedSince): after it
// this process's own exports and buffer keep the account.
func (s *Sink) quietSince(ctx context.Context, cluster, inventory string, held *heldState) (bool, error) {
	inv := cluster + "/" + inventory
	s.mu.Lock()
	verified := s.verified[inv]
	s.mu.Unlock()
	if verified {
		return true, nil
	}
	after, err := s.producedSince(ctx, cluster, inventory, held)
	if err != nil {
		return false, classify(fmt.Errorf("kafka sink: reading what topic %s holds of %s after its state record: %w", s.topic, inv, err))
	}
	if !after {
		s.mu.Lock()
		s.verified[inv] = true
		s.mu.Unlock()
	}
	return !after, nil
}

// clockMargin is how much earlier than a state record's timestamp producedSince starts to
// read: timestamps of records in other partitions may come from other brokers' clocks
// (LogAppendTime topics).
const clockMargin = time.Minute

// producedSince reports whether the topic holds a record of the inventory, other than a state
// record, produced after held, the latest state record: in its partition, at a later offset;
// in another, with a timestamp at or after its millisecond (all another partition can tell;
// an event of the export that wrote the state record in the same millisecond reads as after
// it, which costs a read-back, never a row). It reads each partition from the first record at
// or after clockMargin before the state record (ListOffsets by time) to its end: usually the
// little traffic since the inventory's last export or confirmation, not the topic.
func (s *Sink) producedSince(ctx context.Context, cluster, inventory string, held *heldState) (bool, error) {
	if held.at.IsZero() {
		return true, nil // a state record of unknown time: nothing tells, read the topic back
	}
	starts, err := s.admin.ListOffsetsAfterMilli(ctx, held.at.Add(-clockMargin).UnixMilli(), s.topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return false, fmt.Errorf("listing offsets by time: %w", err)
	}
	ends, err := s.admin.ListEndOffsets(ctx, s.topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return false, fmt.Errorf("listing end offsets: %w", err)
	}
	from, until := map[int32]int64{}, map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if st, ok := starts.Lookup(o.Topic, o.Partition); ok && st.Offset >= 0 && st.Offset < o.Offset {
			from[o.Partition], until[o.Partition] = st.Offset, o.Offset
		}
	})
	found := false
	err = s.scan(ctx, from, until, func(r *kgo.Record) bool {
		if header(r, hCluster) != cluster || header(r, hInventory) != inventory || header(r, hEvent) == evState {
			return true
		}
		if r.Partition == held.partition {
			found = r.Offset > held.offset
		} else {
			found = r.Timestamp.UnixMilli() >= held.at.UnixMilli()
		}
		return !found
	})
	return found, err
}

// readBack reads the topic, from each partition's start to its end offset when the read
// began, and keeps in rb.held the latest row of every key of the inventory whose latest
// record is an upsert. Records are matched by their kollect-cluster and kollect-inventory
// headers (names may hold the key's separator '/'); a purge's tombstone removes a key like a
// delete. A record under the inventory's headers whose value is no change event fails the read
// (terminal): what consumers hold of that key cannot be told.
func (s *Sink) readBack(ctx context.Context, rb *readBack, cluster, inventory string) error {
	inv := cluster + "/" + inventory
	if rb.until == nil {
		from, until, total, err := s.topicRange(ctx)
		if err != nil {
			return fmt.Errorf("kafka sink: reading back what topic %s holds of %s: %w", s.topic, inv, err)
		}
		rb.from, rb.until, rb.total, rb.held = from, until, total, eventbuf.NewHeld()
	}
	state := stateKey(cluster, inventory)
	var bad error
	err := s.scan(ctx, rb.from, rb.until, func(r *kgo.Record) bool {
		rb.read++
		if header(r, hCluster) != cluster || header(r, hInventory) != inventory {
			return true
		}
		key := string(r.Key)
		switch ev := header(r, hEvent); {
		case key == state:
			s.noteState(inv, r) // the state record is no row; remember it for Confirm
		case ev == string(export.ChangeUpsert):
			row, err := eventbuf.RowOf(r.Value)
			if err != nil {
				bad = fmt.Errorf("record %s at %d/%d: %w", key, r.Partition, r.Offset, err)
				return false
			}
			rb.held.Rows[key] = row
		case ev == string(export.ChangeDelete) || ev == evPurge:
			delete(rb.held.Rows, key)
		}
		return true
	})
	if bad != nil {
		return sink.TerminalError(fmt.Errorf("kafka sink: reading back what topic %s holds of %s: %w", s.topic, inv, bad))
	}
	if err != nil {
		return classify(fmt.Errorf("kafka sink: reading back what topic %s holds of %s, %d of %d records read (the next attempt goes on from there): %w",
			s.topic, inv, rb.read, rb.total, err))
	}
	rb.done = true
	return nil
}

// scan reads each partition of from, from its offset there up to (not including) its offset
// in until, and calls fn with every record in partition order; fn returning false ends the
// scan. from is advanced as records are read, so a scan ctx ended can go on where it stopped.
func (s *Sink) scan(ctx context.Context, from, until map[int32]int64, fn func(*kgo.Record) bool) error {
	start := map[int32]kgo.Offset{}
	for p, o := range from {
		if o < until[p] {
			start[p] = kgo.NewOffset().At(o)
		}
	}
	if len(start) == 0 {
		return nil
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), s.opts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{s.topic: start}))...)
	if err != nil {
		return sink.TerminalError(fmt.Errorf("consumer for %s: %w", s.topic, err))
	}
	defer cl.Close()
	for len(start) > 0 {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		var fetchErr error
		fetches.EachError(func(_ string, _ int32, err error) { fetchErr = err })
		if fetchErr != nil {
			return fetchErr
		}
		stop := false
		fetches.EachRecord(func(r *kgo.Record) {
			// After ctx ended the rest of the fetch is left for the next scan.
			if _, reading := start[r.Partition]; stop || !reading || ctx.Err() != nil {
				return
			}
			if r.Offset >= until[r.Partition] {
				delete(start, r.Partition) // produced after the read began
				return
			}
			from[r.Partition] = r.Offset + 1
			if r.Offset+1 >= until[r.Partition] {
				delete(start, r.Partition)
			}
			stop = !fn(r)
		})
		if stop {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// topicRange lists, per partition holding records, the offset to read from (its start) and
// the end to read until, and how many records lie between: the whole topic as it is now,
// for the read-back and for a purge.
func (s *Sink) topicRange(ctx context.Context) (map[int32]int64, map[int32]int64, int64, error) {
	starts, err := s.admin.ListStartOffsets(ctx, s.topic)
	if err != nil {
		return nil, nil, 0, classify(fmt.Errorf("listing start offsets of %s: %w", s.topic, err))
	}
	ends, err := s.admin.ListEndOffsets(ctx, s.topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, nil, 0, classify(fmt.Errorf("listing end offsets of %s: %w", s.topic, err))
	}
	from, until := map[int32]int64{}, map[int32]int64{}
	var total int64
	ends.Each(func(o kadm.ListedOffset) {
		start := int64(0)
		if so, ok := starts.Lookup(o.Topic, o.Partition); ok {
			start = so.Offset
		}
		if o.Offset > start {
			from[o.Partition], until[o.Partition] = start, o.Offset
			total += o.Offset - start
		}
	})
	return from, until, total, nil
}
