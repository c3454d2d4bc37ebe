package nats

import (
	"context"
	"fmt"
	"time"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

// One writer per (cluster, inventory) on a stream. The state message names its writer (see
// confirm.go); an export or confirmation reads the state subject's last message first (one
// direct get) and runs sink.WriterCheck on it, before any event is buffered or published. A
// refused agent publishes one message, the holder's state again with its own contender mark,
// expected to follow the message it read (so it never replaces a newer state of the holder),
// and no row event and no bucket entry. The holder reads the mark at its next export or
// confirmation, carries it into the state it publishes and reports it.
//
// The stream holds no lock between the read and the writes that follow: two agents whose
// first exports meet an empty or stale state at the same moment both publish their events.
// Every state publish after a read expects the message read to be the subject's last still,
// so of the two the second's state publish fails, and its retry reads the first's state and
// is refused. Without {kind} in the subject template there is no state subject, and no
// writer is checked.

// writerCheck is the sink.WriterCheck of a state message; nil names nobody.
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

// checkExport reads the state of the batch's inventory and decides whether its writer may
// export. A writer without an instance never conflicts, so nothing is read for it.
//
// While the connection is down nothing can be read, nor written; a sink that knows the state
// to be its own from a read or publish younger than half the window goes on to buffer the
// batch, so an outage still fills the event buffer (and reports an overflow) rather than
// dropping batches. Nobody can have taken over within half a window of that read: a takeover
// needs the state's writer silent for a whole window.
func (s *Sink) checkExport(ctx context.Context, b *sink.Batch) (sink.WriterCheck, error) {
	env := &b.Envelope
	self := env.Writer
	subject := s.stateSubject(env.Cluster, env.Inventory)
	if self.Instance == "" || subject == "" {
		return sink.WriterCheck{Self: self}, nil
	}
	window := b.ConflictWindow
	if window <= 0 {
		window = sink.DefaultConflictWindow
	}
	inv := env.Cluster + "/" + env.Inventory
	s.mu.Lock()
	cached, ok := s.states[inv]
	s.mu.Unlock()
	own := ok && cached.rec.Writer.Instance == self.Instance && time.Since(cached.readAt) < window/2
	var held *heldState
	if own {
		held = &cached
	}
	if !own || s.nc.IsConnected() {
		rec, seq, err := s.lastState(ctx, subject)
		switch {
		case err == nil && rec == nil:
			held = nil
			s.mu.Lock()
			delete(s.states, inv)
			s.mu.Unlock()
		case err == nil:
			held = &heldState{rec: *rec, seq: seq, readAt: time.Now()}
			s.mu.Lock()
			s.states[inv] = *held
			s.mu.Unlock()
		case !own:
			return sink.WriterCheck{}, classify(fmt.Errorf("nats sink: reading the state of %s/%s from stream %s before exporting: %w",
				env.Cluster, env.Inventory, s.stream, err))
		}
	}
	check := writerCheck(held, env.Cluster, env.Inventory, self, env.ExportedAt, window)
	if refusal := check.Refusal(); refusal != nil {
		return check, s.refuse(ctx, subject, held, check, refusal)
	}
	s.noteTakeover(check)
	return check, nil
}

// refuse publishes the holder's state again with self's contender mark, expected to follow
// the message read, and returns the refusal. A mark that cannot be published (the holder
// published meanwhile, the connection failed) is logged: the refusal stands, and the next
// attempt marks again.
func (s *Sink) refuse(ctx context.Context, subject string, held *heldState, c sink.WriterCheck, refusal error) error {
	marked := held.rec
	marked.Contender, marked.ContendedAt = c.Self, c.Now.UTC()
	if err := s.publishState(ctx, subject, marked, held.seq); err != nil {
		s.log.Info("could not leave the contender mark in the state", "stream", s.stream, "subject", subject, "error", err.Error())
	}
	return refusal
}

// noteTakeover logs a takeover of another instance's state.
func (s *Sink) noteTakeover(c sink.WriterCheck) {
	if c.TakesOver() {
		s.log.Info("taking over the state of another agent that has not written for the conflict window", "stream", s.stream, "cluster", c.Cluster,
			"inventory", c.Inventory, "previous", c.Holder.Instance, "previousLastWrite", c.HolderLastWrite, "window", c.Window)
	}
}
