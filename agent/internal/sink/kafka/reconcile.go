package kafka

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

// maxReconcileRecords bounds the topic size the sink reads back after a restart. Beyond it
// (a large topic shared by many clusters) the resync relies on consumers dropping rows the
// resync did not mention, as docs/sinks/events.md describes.
const maxReconcileRecords = 5_000_000

// staleRows reads the topic back and returns this cluster's and inventory's rows whose latest
// record is an upsert but which are not in the batch's snapshot: rows deleted while the agent
// was down. A full batch has no baseline, and the topic is the only record of what consumers
// hold.
func (s *Sink) staleRows(ctx context.Context, b *sink.Batch) ([]export.Row, error) {
	from, until, total, err := s.topicRange(ctx)
	if err != nil {
		return nil, err
	}
	if total == 0 {
		return nil, nil
	}
	if total > maxReconcileRecords {
		s.log.Info("topic too large to read back after a restart; rows deleted meanwhile get no tombstone",
			"topic", s.topic, "records", total, "limit", maxReconcileRecords)
		return nil, nil
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), s.opts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{s.topic: from}))...)
	if err != nil {
		return nil, sink.TerminalError(fmt.Errorf("consumer for %s: %w", s.topic, err))
	}
	defer cl.Close()
	inv := b.Envelope.Cluster + "/" + b.Envelope.Inventory
	prefix, state := inv+"/", stateKey(b.Envelope.Cluster, b.Envelope.Inventory)
	latest := map[string]*export.Row{} // nil: deleted
	var decodeErr error
	for len(until) > 0 {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, sink.TransientError(fmt.Errorf("reading back %s: %w", s.topic, err))
		}
		var fetchErr error
		fetches.EachError(func(_ string, _ int32, err error) { fetchErr = err })
		if fetchErr != nil {
			return nil, classify(fmt.Errorf("reading back %s: %w", s.topic, fetchErr))
		}
		fetches.EachRecord(func(r *kgo.Record) {
			if end, ok := until[r.Partition]; ok && r.Offset+1 >= end {
				delete(until, r.Partition)
			}
			key := string(r.Key)
			if key == state {
				s.noteState(inv, r) // the state record is no row; remember it for Confirm
				return
			}
			if !strings.HasPrefix(key, prefix) || len(r.Value) == 0 {
				if strings.HasPrefix(key, prefix) {
					latest[key] = nil // tombstone
				}
				return
			}
			var ev export.ChangeEvent
			if err := json.Unmarshal(r.Value, &ev); err != nil || ev.Row == nil {
				decodeErr = fmt.Errorf("record %s at %d/%d is not a change event: %v", key, r.Partition, r.Offset, err)
				return
			}
			if ev.Type == export.ChangeDelete {
				latest[key] = nil
			} else {
				latest[key] = ev.Row
			}
		})
	}
	if decodeErr != nil {
		// Foreign records under our keys: the topic is not ours alone; leave them be.
		s.log.Info("skipping undecodable records while reading back the topic", "topic", s.topic, "error", decodeErr)
	}
	present := make(map[string]struct{}, len(b.Envelope.Rows))
	for i := range b.Envelope.Rows {
		present[b.Envelope.Rows[i].Key().String()] = struct{}{}
	}
	var stale []export.Row
	for key, r := range latest {
		if _, ok := present[key]; r != nil && !ok {
			stale = append(stale, *r)
		}
	}
	slices.SortFunc(stale, func(a, b export.Row) int { return export.Compare(&a, &b) })
	return stale, nil
}

// topicRange lists, per partition holding records, the offset to read from (its start) and
// the end to read until, and how many records lie between: the whole topic as it is now,
// for the read-back after a restart and for a purge.
func (s *Sink) topicRange(ctx context.Context) (map[int32]kgo.Offset, map[int32]int64, int64, error) {
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
	from := map[int32]kgo.Offset{}
	until := map[int32]int64{}
	var total int64
	ends.Each(func(o kadm.ListedOffset) {
		start := int64(0)
		if so, ok := starts.Lookup(o.Topic, o.Partition); ok {
			start = so.Offset
		}
		if o.Offset > start {
			from[o.Partition], until[o.Partition] = kgo.NewOffset().At(start), o.Offset
			total += o.Offset - start
		}
	})
	return from, until, total, nil
}
