package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

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

// records renders one event: the JSON change event, and for a delete a tombstone after it.
func records(e *eventbuf.Event) []*kgo.Record {
	value, _ := e.Encode()
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
	return out
}

// outcome tracks the records of one event.
type outcome struct {
	left   atomic.Int32
	failed atomic.Bool
}

// send produces the events and waits for their acknowledgements or ctx. Records of one key
// go to one partition in produce order (the idempotent producer keeps that order across
// retries), so per-key order holds.
func (s *Sink) send(ctx context.Context, events []eventbuf.Event) ([]bool, error) {
	outcomes := make([]outcome, len(events))
	var wg sync.WaitGroup
	var errOnce sync.Once
	var firstErr error
	for i := range events {
		recs := records(&events[i])
		o := &outcomes[i]
		o.left.Store(int32(len(recs)))
		for _, r := range recs {
			wg.Add(1)
			s.client.Produce(ctx, r, func(_ *kgo.Record, err error) {
				defer wg.Done()
				if err != nil {
					o.failed.Store(true)
					errOnce.Do(func() { firstErr = err })
				}
				o.left.Add(-1)
			})
		}
	}
	if err := wait(ctx, &wg); err != nil {
		return acked(outcomes), classify(fmt.Errorf("producing to %s: %w", s.topic, err))
	}
	if firstErr != nil {
		return acked(outcomes), classify(fmt.Errorf("producing to %s: %w", s.topic, firstErr))
	}
	return acked(outcomes), nil
}

// acked reports the events whose records were all acknowledged so far.
func acked(outcomes []outcome) []bool {
	out := make([]bool, len(outcomes))
	for i := range outcomes {
		out[i] = outcomes[i].left.Load() == 0 && !outcomes[i].failed.Load()
	}
	return out
}

// wait returns when every promise ran or ctx ends. Records still in flight then stay in the
// client until acknowledged or failed by the delivery timeout; their events remain owed.
func wait(ctx context.Context, wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
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
	limit, err := s.messageLimit(ctx)
	if err != nil {
		return err
	}
	chunks, err := eventbuf.Chunks(&b.Envelope, limit)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
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
		wg.Add(1)
		s.client.Produce(ctx, r, func(_ *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				mu.Lock()
				firstErr = errors.Join(firstErr, err)
				mu.Unlock()
			}
		})
	}
	if err := wait(ctx, &wg); err != nil {
		return classify(fmt.Errorf("producing snapshot of %s to %s: %w", inv, s.topic, err))
	}
	if firstErr != nil {
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
