package kafka

import (
	"context"
	"fmt"
	"time"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

// One writer per (cluster, inventory) in a topic. The state record names its writer (see
// confirm.go); an export or confirmation reads the latest state record first (readState: the
// state key's partition from the record the sink last wrote or read to the partition's end,
// usually nothing at all) and runs sink.WriterCheck on it, before any event is buffered or
// produced. A refused agent produces one record, the holder's state record again with its
// own contender mark, and no row event and no tombstone; the holder reads the mark at its
// next export or confirmation, carries it into the state records it writes and reports it.
//
// Kafka has no conditional produce, so nothing holds the state between the read and the
// writes that follow: two agents whose first exports meet an empty or stale state at the same
// moment both produce their events, and the conflict shows at the next write of either. A
// contender's mark produced just after the holder's new state record repeats the holder's
// previous record (its checksum): the holder's next export rewrites its own, and a
// confirmation in between finds another checksum, is sink.ErrNotHeld and exports in full.

// writerCheck is the sink.WriterCheck of a state record; nil names nobody.
func writerCheck(held *heldState, cluster, inventory string, self export.Writer, now time.Time, window time.Duration) sink.WriterCheck {
	c := sink.WriterCheck{Cluster: cluster, Inventory: inventory, Self: self, Now: now, Window: window}
	if held == nil {
		return c
	}
	rec := &held.rec
	c.Holder, c.HolderLastWrite = rec.Writer, rec.ExportedAt
	if rec.ConfirmedAt.After(c.HolderLastWrite) {
		c.HolderLastWrite = rec.ConfirmedAt
	}
	c.Contender, c.ContendedAt = rec.Contender, rec.ContendedAt
	return c
}

// checkExport reads the state record of the batch's inventory and decides whether its writer
// may export. A writer without an instance never conflicts, so nothing is read for it.
//
// While no broker answers (the last export gave up waiting) nothing can be read, nor
// written; a sink that knows the state to be its own from a read or write younger than half
// the window goes on to buffer the batch as it did before writers were checked, so an outage
// still fills the event buffer (and reports an overflow) rather than dropping batches.
// Nobody can have taken over within half a window of that read: a takeover needs the state's
// writer silent for a whole window.
func (s *Sink) checkExport(ctx context.Context, b *sink.Batch) (sink.WriterCheck, error) {
	env := &b.Envelope
	self := env.Writer
	if self.Instance == "" {
		return sink.WriterCheck{Self: self}, nil
	}
	window := b.ConflictWindow
	if window <= 0 {
		window = sink.DefaultConflictWindow
	}
	s.mu.Lock()
	cached := s.states[env.Cluster+"/"+env.Inventory]
	s.mu.Unlock()
	own := cached != nil && cached.rec.Writer.Instance == self.Instance && time.Since(cached.readAt) < window/2
	held := cached
	if !own || !s.unanswered.Load() {
		read, err := s.readState(ctx, env.Cluster, env.Inventory)
		switch {
		case err == nil:
			held = read
		case !own:
			return sink.WriterCheck{}, classify(fmt.Errorf("kafka sink: reading the state of %s/%s in %s before exporting: %w",
				env.Cluster, env.Inventory, s.topic, err))
		}
	}
	check := writerCheck(held, env.Cluster, env.Inventory, self, env.ExportedAt, window)
	if refusal := check.Refusal(); refusal != nil {
		return check, s.refuse(ctx, held, check, refusal)
	}
	s.noteTakeover(check)
	return check, nil
}

// refuse produces the holder's state record again with self's contender mark, and returns the
// refusal. A mark that cannot be produced is logged: the refusal stands, and the next attempt
// marks again.
func (s *Sink) refuse(ctx context.Context, held *heldState, c sink.WriterCheck, refusal error) error {
	marked := held.rec
	marked.Contender, marked.ContendedAt = c.Self, c.Now.UTC()
	if err := s.writeState(ctx, marked); err != nil {
		s.log.Info("could not leave the contender mark in the state record", "topic", s.topic,
			"cluster", c.Cluster, "inventory", c.Inventory, "error", err.Error())
	}
	return refusal
}

// noteTakeover logs a takeover of another instance's state.
func (s *Sink) noteTakeover(c sink.WriterCheck) {
	if c.TakesOver() {
		s.log.Info("taking over the state of another agent that has not written for the conflict window", "topic", s.topic, "cluster", c.Cluster,
			"inventory", c.Inventory, "previous", c.Holder.Instance, "previousLastWrite", c.HolderLastWrite, "window", c.Window)
	}
}
