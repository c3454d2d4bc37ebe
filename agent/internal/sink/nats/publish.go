package nats

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/eventbuf"
)

// Message headers. Consumers filter on them without decoding payloads.
const (
	hSchema    = "Kollect-Schema-Version"
	hCluster   = "Kollect-Cluster"
	hInventory = "Kollect-Inventory"
	hEvent     = "Kollect-Event"
	hKey       = "Kollect-Key"
	hResync    = "Kollect-Resync"
	hChecksum  = "Kollect-Checksum"
	hChunk     = "Kollect-Chunk"
	// kvOperation is the key-value protocol's header: a message with DEL is a delete marker.
	kvOperation = "KV-Operation"
)

// snapshotKind is the {kind} of snapshot chunk subjects.
const snapshotKind = "_snapshot"

// token makes s a single subject token: separators, wildcards and white space become '_'.
func token(s string) string {
	if s == "" {
		return "_"
	}
	return strings.Map(func(r rune) rune {
		switch {
		case r == '.' || r == '*' || r == '>' || r <= ' ' || r == 0x7f:
			return '_'
		}
		return r
	}, s)
}

// Subject renders the template for one row's kind.
func Subject(template, cluster, inventory, kind string) string {
	return strings.NewReplacer("{cluster}", token(cluster), "{inventory}", token(inventory), "{kind}", token(kind)).Replace(template)
}

// streamSubjects is the filter a created stream captures: every token holding a placeholder
// becomes a wildcard.
func streamSubjects(template string) string {
	parts := strings.Split(template, ".")
	for i, p := range parts {
		if strings.Contains(p, "{") {
			parts[i] = "*"
		}
	}
	return strings.Join(parts, ".")
}

// kvKey is the bucket key of a row: its identity key with '.' between the parts, so a
// cluster's or inventory's keys can be listed with a subject filter.
func kvKey(k export.Key) string {
	return kvToken(k.Cluster) + "." + kvToken(k.Inventory) + "." + kvToken(k.Target) + "." + kvToken(k.UID)
}

// kvToken replaces the characters bucket keys do not allow, and '.', with '_'.
func kvToken(s string) string {
	if s == "" {
		return "_"
	}
	return strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || r == '=' || r == '/' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return '_'
	}, s)
}

// msgID identifies one event for JetStream's duplicate detection: the same event re-published
// by a retry has the same ID. The batch time is part of it so that a row changing back to an
// earlier content (A→B→A inside the duplicate window) is not mistaken for a retry.
func msgID(e *eventbuf.Event, rowJSON []byte) string {
	d := sha256.Sum256(rowJSON) // the row's digest
	h := sha256.New()
	h.Write([]byte(e.Key))
	h.Write([]byte{0})
	h.Write(d[:])
	h.Write([]byte{0})
	h.Write([]byte(e.Type))
	h.Write([]byte{0})
	h.Write(strconv.AppendInt(nil, e.ObservedAt.UnixNano(), 10))
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// messages renders one event: the change event on the stream, and the bucket update.
func (s *Sink) messages(e *eventbuf.Event, subjects map[[3]string]string) ([]*nats.Msg, string) {
	data, rowJSON := e.Encode()
	at := [3]string{e.Row.Cluster, e.Row.Inventory, e.Row.Kind}
	subject, ok := subjects[at]
	if !ok {
		subject = Subject(s.template, at[0], at[1], at[2])
		subjects[at] = subject
	}
	m := nats.NewMsg(subject)
	m.Data = data
	m.Header.Set(hSchema, export.SchemaVersion)
	m.Header.Set(hCluster, e.Row.Cluster)
	m.Header.Set(hInventory, e.Row.Inventory)
	m.Header.Set(hEvent, string(e.Type))
	m.Header.Set(hKey, e.Key)
	if e.Resync {
		m.Header.Set(hResync, "true")
	}
	out := []*nats.Msg{m}
	if s.bucket != "" {
		kv := nats.NewMsg("$KV." + s.bucket + "." + kvKey(e.Row.Key()))
		if e.Type == export.ChangeDelete {
			kv.Header.Set(kvOperation, "DEL")
		} else {
			kv.Data = rowJSON
		}
		out = append(out, kv)
	}
	return out, msgID(e, rowJSON)
}

// pending is one unacknowledged publish.
type pending struct {
	event  int
	future jetstream.PubAckFuture
}

// send publishes the events with at most maxInFlight unacknowledged, then waits for the rest.
// An event counts as delivered when all its messages were acknowledged, duplicates included.
func (s *Sink) send(ctx context.Context, events []eventbuf.Event) ([]bool, error) {
	acked := make([]bool, len(events))
	// parts counts the messages of each event not yet acknowledged; -1 marks an event not
	// published at all (the connection failed before it), which is not acknowledged either.
	parts := make([]int8, len(events))
	for i := range parts {
		parts[i] = -1
	}
	failed := make([]bool, len(events))
	var window []pending
	var firstErr error
	subjects := map[[3]string]string{}
	settle := func(p pending) error {
		select {
		case <-p.future.Ok():
			parts[p.event]--
		case err := <-p.future.Err():
			failed[p.event] = true
			if firstErr == nil {
				firstErr = err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}
	result := func(err error) ([]bool, error) {
		for i := range events {
			acked[i] = parts[i] == 0 && !failed[i]
		}
		if err == nil {
			err = firstErr
		}
		if err != nil {
			return acked, classify(fmt.Errorf("publishing to stream %s: %w", s.stream, err))
		}
		return acked, nil
	}
	for i := range events {
		msgs, id := s.messages(&events[i], subjects)
		parts[i] = int8(len(msgs))
		for j, m := range msgs {
			opt := jetstream.WithMsgID(id)
			if j > 0 {
				opt = jetstream.WithMsgID("kv-" + id)
			}
			f, err := s.js.PublishMsgAsync(m, opt)
			if err != nil {
				// Disconnected: nothing more can go out now; what was published still counts.
				err = s.disconnected(err)
				failed[i] = true
				for _, p := range window {
					if err := settle(p); err != nil {
						return result(err)
					}
				}
				return result(err)
			}
			window = append(window, pending{i, f})
			if len(window) >= maxInFlight {
				if err := settle(window[0]); err != nil {
					return result(err)
				}
				window = window[1:]
			}
		}
	}
	for _, p := range window {
		if err := settle(p); err != nil {
			return result(err)
		}
	}
	return result(nil)
}

// exportSnapshot publishes the envelope as numbered chunks under the server's payload limit,
// each with a Nats-Msg-Id of checksum and number. Nothing is buffered: a newer envelope
// supersedes an undelivered one.
func (s *Sink) exportSnapshot(ctx context.Context, b *sink.Batch) error {
	inv := b.Envelope.Cluster + "/" + b.Envelope.Inventory
	s.mu.Lock()
	done := s.sent[inv] == b.Envelope.Checksum && !b.Resync
	s.mu.Unlock()
	if done {
		return nil
	}
	chunks, err := eventbuf.Chunks(&b.Envelope, int(s.nc.MaxPayload())-1024)
	if err != nil {
		return err
	}
	subject := Subject(s.template, b.Envelope.Cluster, b.Envelope.Inventory, snapshotKind)
	var futures []jetstream.PubAckFuture
	for _, ch := range chunks {
		m := nats.NewMsg(subject)
		m.Data = ch.Data
		m.Header.Set(hSchema, export.SchemaVersion)
		m.Header.Set(hCluster, b.Envelope.Cluster)
		m.Header.Set(hInventory, b.Envelope.Inventory)
		m.Header.Set(hEvent, "snapshot")
		m.Header.Set(hResync, "true")
		m.Header.Set(hChecksum, b.Envelope.Checksum)
		m.Header.Set(hChunk, fmt.Sprintf("%d/%d", ch.Index, ch.Count))
		id := fmt.Sprintf("%s:%d:%d", b.Envelope.Checksum, b.Envelope.ExportedAt.UnixNano(), ch.Index)
		f, err := s.js.PublishMsgAsync(m, jetstream.WithMsgID(id))
		if err != nil {
			return classify(fmt.Errorf("publishing snapshot of %s: %w", inv, err))
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return classify(fmt.Errorf("publishing snapshot of %s: %w", inv, err))
		case <-ctx.Done():
			return classify(fmt.Errorf("publishing snapshot of %s: %w", inv, ctx.Err()))
		}
	}
	s.mu.Lock()
	s.sent[inv] = b.Envelope.Checksum
	s.mu.Unlock()
	return nil
}
