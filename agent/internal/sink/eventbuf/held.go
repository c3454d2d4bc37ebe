package eventbuf

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

// Held is what consumers of one inventory hold, as an event sink reads it back from its own
// broker. A batch without a baseline (Diff.Full: the agent restarted, or the sink's state named
// another snapshot than the agent believed) is diffed against it (Reconcile), so that a
// restart sends exactly what changed while the agent was down, deletes included, and nothing
// when nothing changed.
type Held struct {
	// Rows holds, for every key whose latest event is an upsert, the row's canonical JSON as
	// the broker has it (a Kafka record's or a NATS message's "row", a key-value bucket's
	// value). Keys whose latest event is a delete are absent.
	Rows map[string][]byte
	// Uncertain holds keys whose events may or may not have reached consumers (published
	// after the sink's last state, by an export that never finished, where Rows comes from
	// another record than the one consumers read, such as a key-value bucket beside a
	// stream), each with the row its last such event carried. They are sent again in their
	// current state whatever Rows says.
	Uncertain map[string][]byte
}

// NewHeld returns an empty Held to fill.
func NewHeld() Held { return Held{Rows: map[string][]byte{}, Uncertain: map[string][]byte{}} }

// ID names the held content for the buffer as the checksum consumers hold: two reads of the
// same content get the same ID. It is no snapshot checksum (it needs no decoded rows), hence
// its own prefix.
func (h Held) ID() string {
	sum := sha256.New()
	for _, m := range []map[string][]byte{h.Rows, h.Uncertain} {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			d := sha256.Sum256(m[k])
			sum.Write([]byte(k))
			sum.Write([]byte{0})
			sum.Write(d[:])
		}
		sum.Write([]byte{1})
	}
	return "held:" + hex.EncodeToString(sum.Sum(nil))
}

// Reconcile returns b, a batch without a baseline, as the exact change from held: upserts
// for the snapshot's rows that consumers lack or hold with other content (or that are
// uncertain), deletes (each with the row consumers hold, the last one exported) for the keys
// they hold, or may hold, that the snapshot no longer has, and PreviousChecksum naming held,
// so the buffer stages it as a diff. An unchanged snapshot becomes an empty diff: nothing is
// sent.
func Reconcile(b *sink.Batch, held Held) (*sink.Batch, error) {
	out := *b
	out.Diff = export.Diff{}
	out.PreviousChecksum = held.ID()
	rows := b.Envelope.Rows
	present := make(map[string]struct{}, len(rows))
	for i := range rows {
		key := rows[i].Key().String()
		present[key] = struct{}{}
		raw, ok := held.Rows[key]
		_, uncertain := held.Uncertain[key]
		switch {
		case !ok && !uncertain:
			out.Diff.Added = append(out.Diff.Added, rows[i])
		case uncertain || !bytes.Equal(raw, rows[i].CanonicalJSON()):
			out.Diff.Changed = append(out.Diff.Changed, rows[i])
		}
	}
	for _, m := range []map[string][]byte{held.Rows, held.Uncertain} {
		for key, raw := range m {
			if _, ok := present[key]; ok {
				continue
			}
			present[key] = struct{}{} // a key in both gets one delete
			if r, ok := held.Rows[key]; ok {
				raw = r // the row consumers hold, rather than one they may hold
			}
			var r export.Row
			if err := json.Unmarshal(raw, &r); err != nil {
				return nil, sink.Terminalf("the row consumers hold under %s is not a row (%v): %.200s", key, err, raw)
			}
			out.Diff.Deleted = append(out.Diff.Deleted, r)
		}
	}
	// The canonical order, as any diff has: a retry stages the same sequence.
	slices.SortFunc(out.Diff.Deleted, func(a, b export.Row) int { return export.Compare(&a, &b) })
	return &out, nil
}

// Holding returns b, a batch without a baseline whose snapshot the sink's state names (and
// nothing was sent after that state), as an empty diff from that snapshot: the broker holds
// it already, and nothing is sent.
func Holding(b *sink.Batch) *sink.Batch {
	out := *b
	out.Diff = export.Diff{}
	out.PreviousChecksum = b.Envelope.Checksum
	return &out
}

// RowOf returns the "row" member of a change event's JSON exactly as it is encoded there (the
// row's canonical JSON, as the sink wrote it), for Held; an error for a document that is no
// change event.
func RowOf(event []byte) ([]byte, error) {
	var ev struct {
		Row json.RawMessage `json:"row"`
	}
	if err := json.Unmarshal(event, &ev); err != nil {
		return nil, fmt.Errorf("not a change event: %w", err)
	}
	if len(ev.Row) == 0 || ev.Row[0] != '{' {
		return nil, fmt.Errorf("a change event without a row")
	}
	return ev.Row, nil
}
