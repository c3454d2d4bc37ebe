package sinks

// Readers of the event sinks: every record read back with kcat and the nats CLI.

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// --- kafka: kcat -----------------------------------------------------------------------------

type kafkaReader struct{ addr string }

type kcatRecord struct {
	Partition int
	Offset    int64
	Key       *string
	Payload   *string
	// Headers are kcat's flat list: name, value, name, value, ...
	Headers []string
}

func (k *kafkaReader) records(ctx context.Context) ([]kcatRecord, error) {
	out, err := run(ctx, "kcat", "-C", "-b", k.addr, "-t", kafkaTopic, "-e", "-q", "-J", "-o", "beginning")
	if err != nil {
		return nil, err
	}
	var recs []kcatRecord
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var r kcatRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return nil, fmt.Errorf("kcat line %q: %w", line, err)
		}
		recs = append(recs, r)
	}
	sort.Slice(recs, func(i, j int) bool {
		if recs[i].Partition != recs[j].Partition {
			return recs[i].Partition < recs[j].Partition
		}
		return recs[i].Offset < recs[j].Offset
	})
	return recs, nil
}

// header is the value of the record's header name, "" without it.
func (r *kcatRecord) header(name string) string {
	for i := 0; i+1 < len(r.Headers); i += 2 {
		if r.Headers[i] == name {
			return r.Headers[i+1]
		}
	}
	return ""
}

// changeEvent is the export contract's change event, as consumers decode it.
type changeEvent struct {
	Type, Key string
	Row       *contractRow
}

// fold applies change events in order per key: the consumer's view of the latest state.
func fold(events []changeEvent) (rowSet, error) {
	got := rowSet{}
	byKey := map[string]string{} // event key -> row key
	for _, e := range events {
		switch e.Type {
		case "upsert":
			if e.Row == nil {
				return nil, fmt.Errorf("upsert %s without a row", e.Key)
			}
			r, err := e.Row.row()
			if err != nil {
				return nil, err
			}
			if want := r.Cluster + "/" + r.Inventory + "/" + r.Target + "/" + r.UID; e.Key != want {
				return nil, fmt.Errorf("event key %q, want the identity %q", e.Key, want)
			}
			got[r.key()] = r
			byKey[e.Key] = r.key()
		case "delete", "tombstone":
			// A delete of a key never upserted is a consumer's no-op. events.md allows it:
			// after a failed export the sink re-sends the current state of every key the
			// attempt may have delivered, and for a row added and deleted during an outage
			// that state is a delete. The suites bound such events by the write markers of
			// untouched keys and by the outage test's per-key check.
			if rk, ok := byKey[e.Key]; ok {
				delete(got, rk)
			}
		default:
			return nil, fmt.Errorf("event %s of unknown type %q", e.Key, e.Type)
		}
	}
	return got, nil
}

func (k *kafkaReader) rows(ctx context.Context) (rowSet, error) {
	recs, err := k.records(ctx)
	if err != nil {
		return nil, err
	}
	var events []changeEvent
	for _, r := range recs {
		if r.Key == nil {
			return nil, fmt.Errorf("record %d/%d without a key", r.Partition, r.Offset)
		}
		if r.header("kollect-event") == "state" {
			continue // the inventory's state record (kafka.md): no row
		}
		if r.Payload == nil {
			events = append(events, changeEvent{Type: "tombstone", Key: *r.Key})
			continue
		}
		var e changeEvent
		if err := json.Unmarshal([]byte(*r.Payload), &e); err != nil {
			return nil, fmt.Errorf("record %d/%d: %w", r.Partition, r.Offset, err)
		}
		if e.Key != *r.Key {
			return nil, fmt.Errorf("record key %q but event key %q", *r.Key, e.Key)
		}
		events = append(events, e)
	}
	return fold(events)
}

// marks: the topic's end offsets per partition (kcat -Q, the broker's high watermarks) and the
// records per key.
func (k *kafkaReader) marks(ctx context.Context) (map[string]string, error) {
	meta, err := run(ctx, "kcat", "-L", "-b", k.addr, "-t", kafkaTopic, "-J")
	if err != nil {
		return nil, err
	}
	var md struct {
		Topics []struct {
			Partitions []struct{ Partition int }
		}
	}
	if err := json.Unmarshal([]byte(meta), &md); err != nil || len(md.Topics) != 1 {
		return nil, fmt.Errorf("kcat -L: %v: %s", err, meta)
	}
	args := []string{"-Q", "-b", k.addr}
	for _, p := range md.Topics[0].Partitions {
		args = append(args, "-t", fmt.Sprintf("%s:%d:-1", kafkaTopic, p.Partition))
	}
	ends, err := run(ctx, "kcat", args...)
	if err != nil {
		return nil, err
	}
	m := map[string]string{"counter:end offsets": strings.Join(strings.Fields(ends), " ")}
	recs, err := k.records(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		switch {
		case r.Key == nil:
		case r.header("kollect-event") == "state":
			m["meta:state "+*r.Key] += fmt.Sprintf("%d/%d ", r.Partition, r.Offset)
		default:
			u := "uid:" + (*r.Key)[strings.LastIndexByte(*r.Key, '/')+1:]
			m[u] += fmt.Sprintf("%d/%d ", r.Partition, r.Offset)
		}
	}
	return m, nil
}

// --- nats: the nats CLI ----------------------------------------------------------------------

type natsReader struct {
	cli, url string
	mu       sync.Mutex
	// cache holds the messages read so far per stream, by sequence, for the stream created at
	// created[stream]: a stream deleted and created again reuses sequence numbers.
	cache   map[string]map[uint64]natsMsg
	created map[string]string
}

type natsMsg struct {
	Subject string
	Seq     uint64
	Header  string
	Data    []byte
}

func (n *natsReader) nats(ctx context.Context, args ...string) (string, error) {
	return run(ctx, n.cli, append([]string{"--server", n.url}, args...)...)
}

// seqs reads a stream's first and last sequence numbers (nats stream info).
func (n *natsReader) seqs(ctx context.Context, stream string) (first, last uint64, err error) {
	first, last, _, err = n.streamState(ctx, stream)
	return first, last, err
}

// streamState is seqs and the stream's creation time.
func (n *natsReader) streamState(ctx context.Context, stream string) (first, last uint64, created string, err error) {
	out, err := n.nats(ctx, "stream", "info", stream, "--json")
	if err != nil {
		return 0, 0, "", err
	}
	var info struct {
		Created string
		State   struct {
			FirstSeq uint64 `json:"first_seq"`
			LastSeq  uint64 `json:"last_seq"`
		}
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		return 0, 0, "", fmt.Errorf("stream info %s: %w: %s", stream, err, out)
	}
	return info.State.FirstSeq, info.State.LastSeq, info.Created, nil
}

// messages returns the stream's messages, reading only those not read before (a KV stream
// drops superseded revisions: a sequence that is gone is skipped). The event stream loses
// messages only to a purge (kollect sinks purge, or the agent's purge of an inventory deleted
// with deletionPolicy Delete), which may remove messages already cached: when it holds fewer
// messages than the cache, it is read again from its first.
func (n *natsReader) messages(ctx context.Context, stream string) ([]natsMsg, error) {
	msgs, err := n.readMessages(ctx, stream)
	if err != nil || stream != natsStream {
		return msgs, err
	}
	out, err := n.nats(ctx, "stream", "info", stream, "--json")
	if err != nil {
		return nil, err
	}
	var info struct {
		State struct {
			Messages uint64 `json:"messages"`
		}
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		return nil, fmt.Errorf("stream info %s: %w: %s", stream, err, out)
	}
	if uint64(len(msgs)) <= info.State.Messages {
		return msgs, nil
	}
	n.cache[stream] = nil
	return n.readMessages(ctx, stream)
}

// readMessages is messages without the check for purged messages.
func (n *natsReader) readMessages(ctx context.Context, stream string) ([]natsMsg, error) {
	first, last, created, err := n.streamState(ctx, stream)
	if err != nil {
		return nil, err
	}
	if n.created == nil {
		n.created = map[string]string{}
	}
	if n.created[stream] != created {
		n.cache[stream], n.created[stream] = nil, created
	}
	c := n.cache[stream]
	if c == nil {
		c = map[uint64]natsMsg{}
		n.cache[stream] = c
	}
	var max uint64
	for s := range c {
		if s > max {
			max = s
		}
	}
	from := max + 1
	if first > from {
		from = first
	}
	for seq := from; seq <= last && seq > 0; seq++ {
		out, err := n.nats(ctx, "stream", "get", stream, strconv.FormatUint(seq, 10), "--json")
		if err != nil {
			if strings.Contains(err.Error(), "no message found") {
				continue
			}
			return nil, err
		}
		var raw struct {
			Subject string
			Seq     uint64
			Hdrs    []byte
			Data    []byte
		}
		if err := json.Unmarshal([]byte(out), &raw); err != nil {
			return nil, fmt.Errorf("stream get %s %d: %w: %s", stream, seq, err, out)
		}
		c[seq] = natsMsg{Subject: raw.Subject, Seq: raw.Seq, Header: string(raw.Hdrs), Data: raw.Data}
	}
	var msgs []natsMsg
	for _, m := range c {
		msgs = append(msgs, m)
	}
	sort.Slice(msgs, func(i, j int) bool { return msgs[i].Seq < msgs[j].Seq })
	return msgs, nil
}

func (n *natsReader) streamRows(ctx context.Context) (rowSet, []natsMsg, error) {
	msgs, err := n.messages(ctx, natsStream)
	if err != nil {
		return nil, nil, err
	}
	var events []changeEvent
	rowMsgs := msgs[:0:0]
	for _, m := range msgs {
		if strings.Contains(m.Header, "Kollect-Event: state") {
			continue // the inventory's state message (nats.md): no row
		}
		rowMsgs = append(rowMsgs, m)
		var e changeEvent
		if err := json.Unmarshal(m.Data, &e); err != nil {
			return nil, nil, fmt.Errorf("stream message %d: %w", m.Seq, err)
		}
		if !strings.Contains(m.Header, "Kollect-Key: "+e.Key) {
			return nil, nil, fmt.Errorf("stream message %d: header %q lacks Kollect-Key %s", m.Seq, m.Header, e.Key)
		}
		events = append(events, e)
	}
	got, err := fold(events)
	return got, rowMsgs, err
}

// kvRows is the bucket's content: the latest revision per key, deleted keys left out.
func (n *natsReader) kvRows(ctx context.Context) (rowSet, []natsMsg, error) {
	msgs, err := n.messages(ctx, "KV_"+natsBucket)
	if err != nil {
		return nil, nil, err
	}
	latest := map[string]natsMsg{}
	for _, m := range msgs {
		latest[m.Subject] = m
	}
	got := rowSet{}
	for subj, m := range latest {
		if strings.Contains(m.Header, "KV-Operation: DEL") || strings.Contains(m.Header, "KV-Operation: PURGE") {
			continue
		}
		var c contractRow
		if err := json.Unmarshal(m.Data, &c); err != nil {
			return nil, nil, fmt.Errorf("KV %s: %w", subj, err)
		}
		r, err := c.row()
		if err != nil {
			return nil, nil, err
		}
		got[r.key()] = r
	}
	return got, msgs, nil
}

func (n *natsReader) rows(ctx context.Context) (rowSet, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	stream, _, err := n.streamRows(ctx)
	if err != nil {
		return nil, err
	}
	kv, _, err := n.kvRows(ctx)
	if err != nil {
		return nil, err
	}
	if d := diffRows(stream, kv); d != "" {
		return nil, fmt.Errorf("the KV bucket %s differs from the stream's latest state:\n  %s", natsBucket, d)
	}
	return stream, nil
}

// marks: the last sequence numbers of the stream and of the bucket's stream, and per key the
// sequences of its messages.
func (n *natsReader) marks(ctx context.Context) (map[string]string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	m := map[string]string{}
	for _, s := range []string{natsStream, "KV_" + natsBucket} {
		first, last, err := n.seqs(ctx, s)
		if err != nil {
			return nil, err
		}
		m["counter:"+s] = fmt.Sprintf("first_seq %d last_seq %d", first, last)
	}
	_, msgs, err := n.streamRows(ctx)
	if err != nil {
		return nil, err
	}
	for _, msg := range msgs {
		var e changeEvent
		_ = json.Unmarshal(msg.Data, &e)
		m["uid:"+e.Key[strings.LastIndexByte(e.Key, '/')+1:]] += fmt.Sprintf("stream %d ", msg.Seq)
	}
	_, kvMsgs, err := n.kvRows(ctx)
	if err != nil {
		return nil, err
	}
	for _, msg := range kvMsgs {
		m["uid:"+msg.Subject[strings.LastIndexByte(msg.Subject, '.')+1:]] += fmt.Sprintf("kv %d ", msg.Seq)
	}
	return m, nil
}
