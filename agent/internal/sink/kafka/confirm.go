package kafka

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

// evState is the kollect-event header of state records.
const evState = "state"

// stateKey is the record key of the state record of one cluster's inventory. It has three
// segments where a row's key has four (cluster/inventory/target/uid) and a snapshot chunk's
// four (…/snapshot/<n>), so it names no row and no chunk.
func stateKey(cluster, inventory string) string {
	return cluster + "/" + inventory + "/_state"
}

// stateRecord is the value of a state record (export.StateRecord). A compacted topic keeps
// the latest per key.
type stateRecord = export.StateRecord

// heldState is a state record and where it is in the topic.
type heldState struct {
	rec       stateRecord
	partition int32
	offset    int64
	// at is the record's timestamp (when it was produced): records of the inventory
	// produced after it are of an export that never finished (see quietSince).
	at time.Time
	// readAt is when the sink last knew it to be the latest state record: it read the
	// partition up to its end, or produced it.
	readAt time.Time
}

// maxStateRecords bounds the records of its partition the sink reads for a state record.
const maxStateRecords = 5_000_000

// statePartitioner computes the partition of a state key the way the producer's default
// partitioner does for keyed records (murmur2 of the key, as Kafka's Java client).
var statePartitioner = kgo.StickyKeyPartitioner(nil)

// recordExport writes the state record after a successful export, unless the state the sink
// holds already names this checksum, writer and coverage (unchanged data writes nothing).
// A resync of unchanged data writes nothing either; an upgraded agent's export of unchanged
// data renames the writer, and a coverage-only batch (coverageOnly) rewrites the coverage:
// both keep exportedAt, the last change of the rows.
func (s *Sink) recordExport(ctx context.Context, b *sink.Batch) error {
	env := &b.Envelope
	s.mu.Lock()
	held := s.states[env.Cluster+"/"+env.Inventory]
	s.mu.Unlock()
	return s.recordState(ctx, env, held)
}

// recordState writes the state of env unless held says it all already.
func (s *Sink) recordState(ctx context.Context, env *export.Envelope, held *heldState) error {
	if held != nil && held.rec.Checksum == env.Checksum && held.rec.Writer == env.Writer && slices.Equal(held.rec.Coverage, env.Coverage) {
		return nil
	}
	at := env.ExportedAt.UTC()
	rec := stateRecord{SchemaVersion: export.SchemaVersion, Cluster: env.Cluster, Inventory: env.Inventory,
		Checksum: env.Checksum, Rows: len(env.Rows), ExportedAt: at, ConfirmedAt: at, Writer: env.Writer,
		Coverage: slices.Clone(env.Coverage)} // the envelope's list is shared with the other sinks
	if held != nil && held.rec.Checksum == env.Checksum {
		rec.ExportedAt = held.rec.ExportedAt
	}
	if held != nil && !export.Complete(env.Coverage) {
		// Rows the agent cannot currently see are not confirmed current: confirmedAt stays,
		// as the agent's own confirmation does (it confirms only complete snapshots).
		rec.ConfirmedAt = held.rec.ConfirmedAt
	}
	if held != nil {
		// A contender's mark stays, so the holder keeps reporting it for the window.
		rec.Contender, rec.ContendedAt = held.rec.Contender, held.rec.ContendedAt
	}
	if err := s.writeState(ctx, rec); err != nil {
		return classify(fmt.Errorf("producing the state of %s/%s to %s: %w", env.Cluster, env.Inventory, s.topic, err))
	}
	return nil
}

// coverageOnly handles a batch that repeats the checksum the sink accepted last (only the
// coverage changed): when the latest state record names that checksum, the topic holds the
// rows, so only the state record is produced (or nothing, when it says the same already) and
// no row's record. It reports false when the state names another checksum or none (the
// topic was recreated, another agent wrote there): the batch is then exported as any other.
// A batch without a baseline (after a restart) is left to baseline, which also makes sure
// nothing of the inventory was produced after the state record; its outcome is the same.
func (s *Sink) coverageOnly(ctx context.Context, b *sink.Batch) (bool, error) {
	env := &b.Envelope
	if b.Resync || b.Diff.Full || b.PreviousChecksum == "" || b.PreviousChecksum != env.Checksum {
		return false, nil
	}
	s.mu.Lock()
	held := s.states[env.Cluster+"/"+env.Inventory]
	s.mu.Unlock()
	if held == nil || held.rec.Checksum != env.Checksum {
		// Not known in memory (a restarted agent): the topic tells, and exportedAt is kept.
		read, err := s.readState(ctx, env.Cluster, env.Inventory)
		if err != nil {
			return false, classify(fmt.Errorf("reading the state of %s/%s in %s: %w", env.Cluster, env.Inventory, s.topic, err))
		}
		held = read
	}
	if held == nil || held.rec.Checksum != env.Checksum {
		return false, nil
	}
	return true, s.recordState(ctx, env, held)
}

// writeState produces one state record and waits for its acknowledgement.
func (s *Sink) writeState(ctx context.Context, rec stateRecord) error {
	if err := s.reachable(ctx); err != nil {
		return err
	}
	value, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	r := &kgo.Record{Key: []byte(stateKey(rec.Cluster, rec.Inventory)), Value: value, Headers: []kgo.RecordHeader{
		{Key: hSchema, Value: []byte(export.SchemaVersion)},
		{Key: hCluster, Value: []byte(rec.Cluster)},
		{Key: hInventory, Value: []byte(rec.Inventory)},
		{Key: hEvent, Value: []byte(evState)},
		{Key: hChecksum, Value: []byte(rec.Checksum)},
	}}
	f := newFlight(nil, nil, 1)
	var partition int32
	var offset int64
	var at time.Time
	s.client.Produce(ctx, r, func(r *kgo.Record, err error) {
		partition, offset, at = r.Partition, r.Offset, r.Timestamp
		f.finish(err)
	})
	if err := s.wait(ctx, []*flight{f}); err != nil {
		return err
	}
	if _, err := f.state(); err != nil {
		return err
	}
	s.mu.Lock()
	s.states[rec.Cluster+"/"+rec.Inventory] = &heldState{rec: rec, partition: partition, offset: offset, at: at, readAt: time.Now()}
	s.mu.Unlock()
	return nil
}

var _ sink.Confirmer = (*Sink)(nil)

// Confirm produces the state record again with a new confirmedAt and the confirming writer,
// and nothing else, when the latest state record of the cluster's inventory in the topic
// names the confirmed checksum: one record, under the state key, never a row's. The latest
// state record is read from the topic, not assumed: Confirm reads the one partition the state
// key hashes to, from the record the sink last wrote or read there (after a restart from the
// partition's start), to its end. A state record that names another checksum, or none (never
// written, deleted by retention, or the topic recreated), is sink.ErrNotHeld, and the agent
// exports in full. A state record of another live instance refuses the confirmation first
// (see writers.go).
func (s *Sink) Confirm(ctx context.Context, c sink.Confirmation) error {
	if err := s.ensureTopic(ctx); err != nil {
		return err
	}
	held, err := s.readState(ctx, c.Cluster, c.Inventory)
	if err != nil {
		return classify(fmt.Errorf("kafka sink: reading the state of %s/%s in %s: %w", c.Cluster, c.Inventory, s.topic, err))
	}
	check := writerCheck(held, c.Cluster, c.Inventory, c.Writer, c.At, c.ConflictWindow)
	if refusal := check.Refusal(); refusal != nil {
		return s.refuse(ctx, held, check, refusal)
	}
	s.noteTakeover(check)
	if held == nil || held.rec.Checksum != c.Checksum {
		names := "none"
		if held != nil {
			names = export.ShortChecksum(held.rec.Checksum)
		}
		return fmt.Errorf("kafka sink: the state record of %s/%s in %s names %s, not checksum %s: %w", c.Cluster, c.Inventory,
			s.topic, names, export.ShortChecksum(c.Checksum), sink.ErrNotHeld)
	}
	notHeld := func(why string) error {
		return fmt.Errorf("kafka sink: the state record of %s/%s in %s names checksum %s, but %s: %w", c.Cluster, c.Inventory,
			s.topic, export.ShortChecksum(c.Checksum), why, sink.ErrNotHeld)
	}
	// Events produced since the state record (owed by this process, or of an export that
	// never finished) make the topic hold more than the checksum: the agent exports again,
	// which sends what consumers lack.
	if sum, owed, known := s.buf.Delivered(c.Cluster, c.Inventory); owed > 0 || known && sum != c.Checksum {
		return notHeld(fmt.Sprintf("this process owes %d events after %s", owed, export.ShortChecksum(sum)))
	}
	if quiet, err := s.quietSince(ctx, c.Cluster, c.Inventory, held); err != nil {
		return err
	} else if !quiet {
		return notHeld("records of an export that did not finish follow it")
	}
	// The record read back, coverage included, is rewritten with only confirmedAt and the
	// writer changed: the coverage is what was exported with this checksum, and the
	// confirmation states nothing about it (c.Coverage equals it whenever the agent confirms,
	// which it does only for the coverage the sink accepted; a caller that names none must
	// not erase it).
	rec := held.rec
	rec.ConfirmedAt = c.At.UTC()
	rec.Writer = c.Writer
	if err := s.writeState(ctx, rec); err != nil {
		return classify(fmt.Errorf("kafka sink: confirming %s/%s in %s: %w", c.Cluster, c.Inventory, s.topic, err))
	}
	return check.Contention()
}

// readState returns the latest state record of the cluster's inventory in the topic, nil when
// there is none. It reads at most the last maxStateRecords records of the partition: a
// state record further back (a huge topic, after a restart) is not found, and reads as none
// (an export without a baseline then reads the topic back, see baseline).
func (s *Sink) readState(ctx context.Context, cluster, inventory string) (*heldState, error) {
	inv := cluster + "/" + inventory
	key := stateKey(cluster, inventory)
	s.mu.Lock()
	held := s.states[inv]
	s.mu.Unlock()
	starts, err := s.admin.ListStartOffsets(ctx, s.topic)
	if err != nil {
		return nil, fmt.Errorf("listing start offsets: %w", err)
	}
	ends, err := s.admin.ListEndOffsets(ctx, s.topic)
	if err != nil {
		return nil, fmt.Errorf("listing end offsets: %w", err)
	}
	if err := ends.Error(); err != nil {
		return nil, fmt.Errorf("listing end offsets: %w", err)
	}
	partitions := len(ends[s.topic])
	if partitions == 0 {
		return nil, fmt.Errorf("topic %s has no partitions", s.topic)
	}
	p := int32(statePartitioner.ForTopic(s.topic).Partition(&kgo.Record{Key: []byte(key)}, partitions))
	if held != nil {
		p = held.partition
	}
	start, end := int64(0), int64(0)
	if o, ok := starts.Lookup(s.topic, p); ok {
		start = o.Offset
	}
	if o, ok := ends.Lookup(s.topic, p); ok {
		end = o.Offset
	}
	from := start
	if held != nil {
		if held.offset < start || held.offset >= end {
			held = nil // removed by retention, or the topic was recreated
		} else {
			from = held.offset + 1
		}
	}
	if end-from > maxStateRecords {
		s.log.Info("reading only the newest records of the state record's partition", "topic", s.topic, "partition", p,
			"records", end-from, "limit", maxStateRecords, "cluster", cluster, "inventory", inventory)
		from, held = end-maxStateRecords, nil
	}
	if from < end {
		read, found, err := s.scanState(ctx, key, p, from, end)
		if err != nil {
			return nil, err
		}
		if found {
			held = read
		}
	}
	s.mu.Lock()
	if held == nil {
		delete(s.states, inv)
	} else {
		fresh := *held // shared with earlier callers: a copy carries the new readAt
		fresh.readAt = time.Now()
		held = &fresh
		s.states[inv] = held
	}
	s.mu.Unlock()
	return held, nil
}

// scanState reads partition p from offset from to end and returns the last record of key:
// found is false when none is there, held nil when the last one is not a state record.
func (s *Sink) scanState(ctx context.Context, key string, p int32, from, end int64) (held *heldState, found bool, err error) {
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), s.opts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{s.topic: {p: kgo.NewOffset().At(from)}}))...)
	if err != nil {
		return nil, false, sink.TerminalError(fmt.Errorf("consumer for %s: %w", s.topic, err))
	}
	defer cl.Close()
	for done := false; !done; {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, false, err
		}
		var fetchErr error
		fetches.EachError(func(_ string, _ int32, err error) { fetchErr = err })
		if fetchErr != nil {
			return nil, false, fetchErr
		}
		fetches.EachRecord(func(r *kgo.Record) {
			if r.Offset+1 >= end {
				done = true
			}
			if string(r.Key) != key {
				return
			}
			found, held = true, decodeState(r)
		})
	}
	return held, found, nil
}

// decodeState decodes a state record; nil for a tombstone or a value that is not one.
func decodeState(r *kgo.Record) *heldState {
	var rec stateRecord
	if len(r.Value) == 0 || json.Unmarshal(r.Value, &rec) != nil || rec.Checksum == "" {
		return nil
	}
	return &heldState{rec: rec, partition: r.Partition, offset: r.Offset, at: r.Timestamp, readAt: time.Now()}
}

// noteState remembers a state record readBack met while reading the topic back.
func (s *Sink) noteState(inv string, r *kgo.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if held := decodeState(r); held != nil {
		s.states[inv] = held
	} else {
		delete(s.states, inv)
	}
}
