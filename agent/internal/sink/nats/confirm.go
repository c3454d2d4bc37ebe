package nats

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

// stateKind is the {kind} of state subjects, and evState the Kollect-Event of state messages.
const (
	stateKind = "_state"
	evState   = "state"
)

// stateRecord is the payload of a state message (export.StateRecord). The last message on the
// state subject is the current state. The writer is part of the payload, hence of the
// Nats-Msg-Id digest: a confirmation by a new writer is a new message even at the same
// confirmedAt.
type stateRecord = export.StateRecord

// heldState is a state message and its sequence in the stream.
type heldState struct {
	rec stateRecord
	seq uint64
	// readAt is when the sink last knew it to be the state subject's last message: it read
	// it back, or published it.
	readAt time.Time
}

// stateSubject is the subject of a cluster's inventory's state messages, "" when the template
// has no {kind}: the state would share the subject of the change events then, and the sink
// keeps no state on the stream (a confirmation is the connection test alone).
func (s *Sink) stateSubject(cluster, inventory string) string {
	if !strings.Contains(s.template, "{kind}") {
		return ""
	}
	return Subject(s.template, cluster, inventory, stateKind)
}

// recordExport publishes the state message after a successful export, unless the state this
// sink last published names this checksum, writer and coverage already (unchanged data
// publishes nothing).
// A resync of unchanged data writes nothing either; an upgraded agent's export of unchanged
// data renames the writer, and a coverage-only batch (coverageOnly) rewrites the coverage:
// both keep exportedAt, the last change of the rows.
func (s *Sink) recordExport(ctx context.Context, b *sink.Batch) error {
	env := &b.Envelope
	subject := s.stateSubject(env.Cluster, env.Inventory)
	if subject == "" {
		return nil
	}
	s.mu.Lock()
	held, ok := s.states[env.Cluster+"/"+env.Inventory]
	s.mu.Unlock()
	var last *heldState
	if ok {
		last = &held
	}
	return s.recordState(ctx, subject, env, last)
}

// recordState publishes the state of env on subject unless held says it all already. With
// held, the publish expects held to be the subject's last message still (a contender's mark
// or another writer's state published since fails it; the delivery worker's retry reads the
// state again).
func (s *Sink) recordState(ctx context.Context, subject string, env *export.Envelope, last *heldState) error {
	var held *stateRecord
	var expect []uint64
	if last != nil {
		held, expect = &last.rec, []uint64{last.seq}
	}
	if held != nil && held.Checksum == env.Checksum && held.Writer == env.Writer && slices.Equal(held.Coverage, env.Coverage) {
		return nil
	}
	at := env.ExportedAt.UTC()
	rec := stateRecord{SchemaVersion: export.SchemaVersion, Cluster: env.Cluster, Inventory: env.Inventory,
		Checksum: env.Checksum, Rows: len(env.Rows), ExportedAt: at, ConfirmedAt: at, Writer: env.Writer,
		Coverage: slices.Clone(env.Coverage)} // the envelope's list is shared with the other sinks
	if held != nil && held.Checksum == env.Checksum {
		rec.ExportedAt = held.ExportedAt
	}
	if held != nil && !export.Complete(env.Coverage) {
		// Rows the agent cannot currently see are not confirmed current: confirmedAt stays,
		// as the agent's own confirmation does (it confirms only complete snapshots).
		rec.ConfirmedAt = held.ConfirmedAt
	}
	if held != nil {
		// A contender's mark stays, so the holder keeps reporting it for the window.
		rec.Contender, rec.ContendedAt = held.Contender, held.ContendedAt
	}
	if err := s.publishState(ctx, subject, rec, expect...); err != nil {
		return classify(fmt.Errorf("publishing the state of %s/%s to stream %s: %w", env.Cluster, env.Inventory, s.stream, err))
	}
	return nil
}

// coverageOnly handles a batch that repeats the checksum the sink accepted last (only the
// coverage changed): when the last state message names that checksum, the stream holds the
// rows, so only the state message is published (or nothing, when it says the same already),
// no event and no bucket entry. It reports false when the state names another checksum or
// none, or the template leaves no state subject: the batch is then exported as any other.
// A batch without a baseline (after a restart) is left to baseline, which also makes sure
// nothing of the inventory was published after the state; its outcome is the same.
func (s *Sink) coverageOnly(ctx context.Context, b *sink.Batch) (bool, error) {
	env := &b.Envelope
	subject := s.stateSubject(env.Cluster, env.Inventory)
	if subject == "" || b.Resync || b.Diff.Full || b.PreviousChecksum == "" || b.PreviousChecksum != env.Checksum {
		return false, nil
	}
	s.mu.Lock()
	held, ok := s.states[env.Cluster+"/"+env.Inventory]
	s.mu.Unlock()
	if !ok || held.rec.Checksum != env.Checksum {
		// Not known in memory (a restarted agent): the stream tells, and exportedAt is kept.
		rec, seq, err := s.lastState(ctx, subject)
		if err != nil {
			return false, classify(fmt.Errorf("reading the state of %s/%s from stream %s: %w", env.Cluster, env.Inventory, s.stream, err))
		}
		if rec == nil {
			return false, nil
		}
		held = heldState{rec: *rec, seq: seq, readAt: time.Now()}
	}
	if held.rec.Checksum != env.Checksum {
		return false, nil
	}
	return true, s.recordState(ctx, subject, env, &held)
}

// lastState reads the last message on the state subject: nil when there is none or it is no
// state message, with its sequence.
func (s *Sink) lastState(ctx context.Context, subject string) (*stateRecord, uint64, error) {
	st, err := s.js.Stream(ctx, s.stream)
	if err != nil {
		return nil, 0, fmt.Errorf("looking up stream %s: %w", s.stream, s.disconnected(err))
	}
	last, err := st.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, nil
	} else if err != nil {
		return nil, 0, s.disconnected(err)
	}
	var rec stateRecord
	if last.Header.Get(hEvent) != evState || json.Unmarshal(last.Data, &rec) != nil {
		return nil, last.Sequence, nil
	}
	return &rec, last.Sequence, nil
}

// publishState publishes one state message and waits for the stream's acknowledgement. The
// Nats-Msg-Id is a digest of the record, so a retried publish is stored once. With lastSeq,
// the stream refuses it unless the state subject's last message is still that one.
func (s *Sink) publishState(ctx context.Context, subject string, rec stateRecord, lastSeq ...uint64) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	m := nats.NewMsg(subject)
	m.Data = data
	m.Header.Set(hSchema, export.SchemaVersion)
	m.Header.Set(hCluster, rec.Cluster)
	m.Header.Set(hInventory, rec.Inventory)
	m.Header.Set(hEvent, evState)
	m.Header.Set(hChecksum, rec.Checksum)
	d := sha256.Sum256(data)
	opts := []jetstream.PublishOpt{jetstream.WithMsgID("state-" + hex.EncodeToString(d[:16]))}
	for _, seq := range lastSeq {
		opts = append(opts, jetstream.WithExpectLastSequencePerSubject(seq))
	}
	inv := rec.Cluster + "/" + rec.Inventory
	ack, err := s.js.PublishMsg(ctx, m, opts...)
	if err != nil {
		if wrongLastSequence(err) {
			// Someone published on the state subject since it was read: what this sink holds
			// in memory is no longer the last message, and the next attempt reads it again.
			s.mu.Lock()
			delete(s.states, inv)
			s.mu.Unlock()
			return fmt.Errorf("the state on %s changed since it was read (another agent's state or contender mark): %w", subject, err)
		}
		return s.disconnected(err)
	}
	s.mu.Lock()
	s.states[inv] = heldState{rec: rec, seq: ack.Sequence, readAt: time.Now()}
	s.mu.Unlock()
	return nil
}

// wrongLastSequence reports whether a publish failed its expected last subject sequence.
func wrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

var _ sink.Confirmer = (*Sink)(nil)

// Confirm publishes the state message again with a new confirmedAt and the confirming writer,
// and nothing else, when the last message on the cluster's inventory's state subject (read
// from the stream, one direct get) names the confirmed checksum: one message, on the state
// subject, expected to follow that last one (a concurrent export's state is never overwritten
// by a confirmation). A state naming another checksum, or none, is sink.ErrNotHeld: the agent
// exports in full. A state of another live instance refuses the confirmation first (see
// writers.go). Without {kind} in the subject template there is no state subject, and
// Confirm is the connection test.
func (s *Sink) Confirm(ctx context.Context, c sink.Confirmation) error {
	ctx, stop := s.denied.watch(ctx)
	defer stop()
	return s.explain(ctx, s.confirm(ctx, c))
}

func (s *Sink) confirm(ctx context.Context, c sink.Confirmation) error {
	subject := s.stateSubject(c.Cluster, c.Inventory)
	if subject == "" {
		return s.Probe(ctx)
	}
	if err := s.ensureStream(ctx); err != nil {
		return err
	}
	st, err := s.js.Stream(ctx, s.stream)
	if err != nil {
		return classify(fmt.Errorf("nats sink: looking up stream %s: %w", s.stream, err))
	}
	notHeld := func(names string) error {
		return fmt.Errorf("nats sink: the state of %s/%s on %s names %s, not checksum %s: %w", c.Cluster, c.Inventory,
			subject, names, export.ShortChecksum(c.Checksum), sink.ErrNotHeld)
	}
	last, err := st.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return notHeld("none")
	} else if err != nil {
		return classify(fmt.Errorf("nats sink: reading the state of %s/%s from stream %s: %w", c.Cluster, c.Inventory, s.stream, s.disconnected(err)))
	}
	var rec stateRecord
	if last.Header.Get(hEvent) != evState || json.Unmarshal(last.Data, &rec) != nil {
		return notHeld("no state (message " + strconv.FormatUint(last.Sequence, 10) + " is not a state message)")
	}
	held := &heldState{rec: rec, seq: last.Sequence, readAt: time.Now()}
	check := writerCheck(held, c.Cluster, c.Inventory, c.Writer, c.At, c.ConflictWindow)
	if refusal := check.Refusal(); refusal != nil {
		return s.refuse(ctx, subject, held, check, refusal)
	}
	s.noteTakeover(check)
	if rec.Checksum != c.Checksum {
		return notHeld(export.ShortChecksum(rec.Checksum))
	}
	// Events published since the state (owed by this process, or of an export that never
	// finished) make the stream hold more than the checksum: the agent exports again, which
	// sends what consumers lack.
	notHeldBut := func(why string) error {
		return fmt.Errorf("nats sink: the state of %s/%s on %s names checksum %s, but %s: %w", c.Cluster, c.Inventory,
			subject, export.ShortChecksum(c.Checksum), why, sink.ErrNotHeld)
	}
	if sum, owed, known := s.buf.Delivered(c.Cluster, c.Inventory); owed > 0 || known && sum != c.Checksum {
		return notHeldBut(fmt.Sprintf("this process owes %d events after %s", owed, export.ShortChecksum(sum)))
	}
	if after, err := s.lastOfInventory(ctx, c.Cluster, c.Inventory); err != nil {
		return classify(fmt.Errorf("nats sink: reading the state of %s/%s from stream %s: %w", c.Cluster, c.Inventory, s.stream, err))
	} else if after != nil && after.Subject != subject {
		return notHeldBut(fmt.Sprintf("events of an export that did not finish follow it (message %d on %s)", after.Sequence, after.Subject))
	}
	// The message read back, coverage included, is published again with only confirmedAt and
	// the writer changed: the coverage is what was exported with this checksum, and the
	// confirmation states nothing about it (c.Coverage equals it whenever the agent confirms,
	// which it does only for the coverage the sink accepted; a caller that names none must
	// not erase it).
	rec.ConfirmedAt = c.At.UTC()
	rec.Writer = c.Writer
	if err := s.publishState(ctx, subject, rec, last.Sequence); err != nil {
		return classify(fmt.Errorf("nats sink: confirming %s/%s on %s: %w", c.Cluster, c.Inventory, subject, err))
	}
	return check.Contention()
}
