package kafka

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/eventbuf"
)

// Record headers. Consumers filter on them without decoding values.
const (
	hSchema    = "kollect-schema-version"
	hCluster   = "kollect-cluster"
	hInventory = "kollect-inventory"
	hEvent     = "kollect-event"
	hResync    = "kollect-resync"
	hChecksum  = "kollect-checksum"
	hChunk     = "kollect-chunk"
)

// records renders one event: the JSON change event, and for a delete a tombstone after it. It
// also returns the row's canonical JSON within the value.
func records(e *eventbuf.Event) ([]*kgo.Record, []byte) {
	value, row := e.Encode()
	headers := []kgo.RecordHeader{
		{Key: hSchema, Value: []byte(export.SchemaVersion)},
		{Key: hCluster, Value: []byte(e.Row.Cluster)},
		{Key: hInventory, Value: []byte(e.Row.Inventory)},
		{Key: hEvent, Value: []byte(e.Type)},
	}
	if e.Resync {
		headers = append(headers, kgo.RecordHeader{Key: hResync, Value: []byte("true")})
	}
	key := []byte(e.Key)
	out := []*kgo.Record{{Key: key, Value: value, Headers: headers}}
	if e.Type == export.ChangeDelete {
		// Value nil is a tombstone: compaction removes the key once it has run.
		out = append(out, &kgo.Record{Key: key, Headers: headers})
	}
	return out, row
}

// flight is the produce of one event's records. It outlives a failed export: with the
// idempotent producer, franz-go cannot fail a record once a request carrying it was written
// without an answer, so such a record may still be delivered when the broker returns.
type flight struct {
	value []byte // the change event as produced: a retry of it is this same event
	// deleted is, for a delete event, the row it deletes: another delete of that row says
	// the same (it differs only in observedAt, after a buffer overflow re-staged it).
	deleted []byte
	left    atomic.Int32
	err     atomic.Pointer[error]
	done    chan struct{}
}

func newFlight(value, deleted []byte, records int) *flight {
	f := &flight{value: value, deleted: deleted, done: make(chan struct{})}
	f.left.Store(int32(records))
	return f
}

// repeats reports whether producing e (rendered as value, row) again would tell consumers
// nothing this flight does not.
func (f *flight) repeats(e *eventbuf.Event, value, row []byte) bool {
	if bytes.Equal(f.value, value) {
		return true
	}
	return e.Type == export.ChangeDelete && f.deleted != nil && bytes.Equal(f.deleted, row)
}

func (f *flight) finish(err error) {
	if err != nil {
		f.err.CompareAndSwap(nil, &err)
	}
	if f.left.Add(-1) == 0 {
		close(f.done)
	}
}

// state reports whether every record of the event was answered, and the first error if one
// failed.
func (f *flight) state() (resolved bool, err error) {
	select {
	case <-f.done:
		if p := f.err.Load(); p != nil {
			return true, *p
		}
		return true, nil
	default:
		return false, nil
	}
}

// send produces the events and waits for their acknowledgements or ctx. Records of one key
// go to one partition in produce order (the idempotent producer keeps that order across
// retries), so per-key order holds. An event whose earlier produce is still in flight, or was
// acknowledged after its export gave up, is not produced again: its outcome is awaited
// instead, so a broker outage leaves no duplicate behind.
func (s *Sink) send(ctx context.Context, events []eventbuf.Event) ([]bool, error) {
	if err := s.reachable(ctx); err != nil {
		return s.settled(events), classify(fmt.Errorf("producing to %s: %w", s.topic, err))
	}
	flights := make([]*flight, len(events))
	for i := range events {
		recs, row := records(&events[i])
		key := events[i].Key
		if f := s.flights[key]; f != nil && f.repeats(&events[i], recs[0].Value, row) {
			if resolved, err := f.state(); !resolved || err == nil {
				flights[i] = f
				continue
			}
		}
		var deleted []byte
		if events[i].Type == export.ChangeDelete {
			deleted = row
		}
		f := newFlight(recs[0].Value, deleted, len(recs))
		s.flights[key] = f
		flights[i] = f
		for _, r := range recs {
			s.client.Produce(ctx, r, func(_ *kgo.Record, err error) { f.finish(err) })
		}
	}
	waitErr := s.wait(ctx, flights)
	acked := make([]bool, len(events))
	var firstErr error
	for i, f := range flights {
		resolved, err := f.state()
		if !resolved {
			continue // still in flight: kept, so the next attempt awaits it
		}
		acked[i] = err == nil
		if err != nil && firstErr == nil {
			firstErr = err
		}
		if s.flights[events[i].Key] == f {
			delete(s.flights, events[i].Key)
		}
	}
	s.forgetResolved(len(events))
	if waitErr != nil {
		return acked, classify(fmt.Errorf("producing to %s: %w", s.topic, waitErr))
	}
	if firstErr != nil {
		return acked, classify(fmt.Errorf("producing to %s: %w", s.topic, firstErr))
	}
	return acked, nil
}

// settled answers, without producing anything, which events an earlier produce delivered.
func (s *Sink) settled(events []eventbuf.Event) []bool {
	acked := make([]bool, len(events))
	for i := range events {
		f := s.flights[events[i].Key]
		if f == nil {
			continue
		}
		recs, row := records(&events[i])
		if !f.repeats(&events[i], recs[0].Value, row) {
			continue
		}
		if resolved, err := f.state(); resolved {
			acked[i] = err == nil
			delete(s.flights, events[i].Key)
		}
	}
	return acked
}

// reachable lets an export hand records to franz-go only when a broker answered since the
// last export that failed waiting: records handed over during an outage cannot be withdrawn,
// so each attempt would leave one more intermediate value of every changed row to be
// delivered when the brokers return. Held back, an outage leaves at most the records of the
// attempt that met it (events.md, "Latest state").
func (s *Sink) reachable(ctx context.Context) error {
	if !s.unanswered.Load() {
		return nil
	}
	if err := s.ping(ctx); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("no broker of %s answers: %w", strings.Join(s.brokers, ","), err)
	}
	s.unanswered.Store(false)
	return nil
}

// forgetResolved drops flights that ended for keys this send did not carry (their events were
// superseded), once the map holds more than the send's events: it stays as small as what is
// in flight.
func (s *Sink) forgetResolved(sent int) {
	if len(s.flights) <= sent {
		return
	}
	for key, f := range s.flights {
		if resolved, _ := f.state(); resolved {
			delete(s.flights, key)
		}
	}
}

// brokerCheck is how often a wait for acknowledgements that makes no progress asks whether
// any broker answers at all.
const brokerCheck = 2 * time.Second

// wait returns when every flight resolved or ctx ends, or as soon as no broker answers while
// nothing is acknowledged: franz-go keeps records it cannot send until the brokers return (it
// fails them by their delivery timeout only once it can try), so without this an unreachable
// cluster would look like a slow one until the export's deadline, with no error to show.
// Records still in flight stay in the client; their events remain owed, and the next
// attempt awaits them (see flight).
func (s *Sink) wait(ctx context.Context, flights []*flight) (err error) {
	defer func() {
		if err != nil {
			s.unanswered.Store(true)
		}
	}()
	ticker := time.NewTicker(brokerCheck)
	defer ticker.Stop()
	progressed := false
	for _, f := range flights {
		for waiting := true; waiting; {
			select {
			case <-f.done:
				waiting, progressed = false, true
			case <-ctx.Done():
				return ctx.Err()
			case <-ticker.C:
				if progressed {
					progressed = false
					continue
				}
				if err := s.ping(ctx); err != nil && ctx.Err() == nil {
					return fmt.Errorf("no broker of %s answers: %w", strings.Join(s.brokers, ","), err)
				}
			}
		}
	}
	return nil
}

// ping asks whether any broker answers. A connection the broker closed reads as a bare EOF on
// the first try; the second dials afresh and says why it cannot connect.
func (s *Sink) ping(ctx context.Context) error {
	var err error
	for range 2 {
		pctx, cancel := context.WithTimeout(ctx, brokerCheck)
		err = s.client.Ping(pctx)
		cancel()
		if err == nil {
			return nil
		}
	}
	return err
}

func snapshotKey(cluster, inventory string, chunk int) string {
	return cluster + "/" + inventory + "/snapshot/" + strconv.Itoa(chunk)
}

// exportSnapshot produces the envelope as numbered chunks, keyed per chunk so a compacted
// topic keeps the newest chunk of each number; readers assemble the chunks sharing a checksum.
// Nothing is buffered: a newer envelope supersedes an undelivered one.
func (s *Sink) exportSnapshot(ctx context.Context, b *sink.Batch) error {
	inv := b.Envelope.Cluster + "/" + b.Envelope.Inventory
	s.mu.Lock()
	done := s.sent[inv] == b.Envelope.Checksum && !b.Resync
	s.mu.Unlock()
	if done {
		return nil
	}
	if err := s.reachable(ctx); err != nil {
		return classify(fmt.Errorf("producing snapshot of %s to %s: %w", inv, s.topic, err))
	}
	limit, err := s.messageLimit(ctx)
	if err != nil {
		return err
	}
	chunks, err := eventbuf.Chunks(&b.Envelope, limit)
	if err != nil {
		return err
	}
	f := newFlight(nil, nil, len(chunks))
	for _, ch := range chunks {
		r := &kgo.Record{Key: []byte(snapshotKey(b.Envelope.Cluster, b.Envelope.Inventory, ch.Index)), Value: ch.Data,
			Headers: []kgo.RecordHeader{
				{Key: hSchema, Value: []byte(export.SchemaVersion)},
				{Key: hCluster, Value: []byte(b.Envelope.Cluster)},
				{Key: hInventory, Value: []byte(b.Envelope.Inventory)},
				{Key: hEvent, Value: []byte("snapshot")},
				{Key: hResync, Value: []byte("true")},
				{Key: hChecksum, Value: []byte(b.Envelope.Checksum)},
				{Key: hChunk, Value: []byte(fmt.Sprintf("%d/%d", ch.Index, ch.Count))},
			}}
		s.client.Produce(ctx, r, func(_ *kgo.Record, err error) { f.finish(err) })
	}
	if err := s.wait(ctx, []*flight{f}); err != nil {
		return classify(fmt.Errorf("producing snapshot of %s to %s: %w", inv, s.topic, err))
	}
	if _, firstErr := f.state(); firstErr != nil {
		return classify(fmt.Errorf("producing snapshot of %s to %s: %w", inv, s.topic, firstErr))
	}
	s.mu.Lock()
	s.sent[inv] = b.Envelope.Checksum
	s.mu.Unlock()
	return nil
}

// producerMax is franz-go's default ProducerBatchMaxBytes: one chunk must fit one batch.
const producerMax = 1_000_012

// messageLimit is the size a chunk document may have: the smallest of the topic's
// max.message.bytes, the broker's message.max.bytes (a topic without an override inherits it,
// though not every broker reports it so) and the producer's batch limit, less room for the
// record's key, headers and framing.
func (s *Sink) messageLimit(ctx context.Context) (int, error) {
	s.mu.Lock()
	limit := s.maxBytes
	s.mu.Unlock()
	if limit > 0 {
		return limit - 2048, nil
	}
	limit = producerMax
	topic, err := s.admin.DescribeTopicConfigs(ctx, s.topic)
	if err != nil {
		return 0, classify(fmt.Errorf("reading configuration of topic %s: %w", s.topic, err))
	}
	if limit, err = minConfig(topic, s.topic, "max.message.bytes", limit); err != nil {
		return 0, classify(fmt.Errorf("reading configuration of topic %s: %w", s.topic, err))
	}
	brokers, err := s.admin.ListBrokers(ctx)
	if err != nil || len(brokers) == 0 {
		return 0, classify(fmt.Errorf("listing brokers: %w", err))
	}
	broker, err := s.admin.DescribeBrokerConfigs(ctx, brokers[0].NodeID)
	if err != nil {
		return 0, classify(fmt.Errorf("reading broker configuration: %w", err))
	}
	if limit, err = minConfig(broker, strconv.Itoa(int(brokers[0].NodeID)), "message.max.bytes", limit); err != nil {
		return 0, classify(fmt.Errorf("reading broker configuration: %w", err))
	}
	s.mu.Lock()
	s.maxBytes = limit
	s.mu.Unlock()
	return limit - 2048, nil
}

// minConfig lowers limit to the integer value of key in resource name.
func minConfig(configs kadm.ResourceConfigs, name, key string, limit int) (int, error) {
	rc, err := configs.On(name, nil)
	if err != nil {
		return 0, err
	}
	if rc.Err != nil {
		return 0, rc.Err
	}
	for _, c := range rc.Configs {
		if c.Key == key && c.Value != nil {
			if n, err := strconv.Atoi(*c.Value); err == nil && n > 0 && n < limit {
				limit = n
			}
		}
	}
	return limit, nil
}
