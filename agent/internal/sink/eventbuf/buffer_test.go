package eventbuf

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

func row(uid string, v int) export.Row {
	attrs, err := export.EncodeAttributes(map[string]any{"v": v})
	if err != nil {
		panic(err)
	}
	return export.Row{Origin: &export.Origin{Cluster: "c1", Inventory: "inv", Target: "t", Version: "v1", Kind: "Pod"}, Namespace: "ns", Name: "pod-" + uid, UID: uid, Attributes: attrs}
}

// consumer applies events as a compacted topic or a KV bucket would: latest value per key.
type consumer struct {
	state map[string]string
	seen  []Event
	// duplicates counts events delivered again with the content the key's last delivered
	// event had, although nothing else was offered for the key in between (a re-send the
	// buffer could have known was needless). Resync events are re-sends by design.
	duplicates int
	last       map[string]string // key → type and row of its last delivered event
	offered    map[string]bool   // key → another content was offered since
}

func content(e *Event) string { return string(e.Type) + " " + string(e.Row.CanonicalJSON()) }

func (c *consumer) offer(e *Event) {
	if c.last == nil {
		c.last, c.offered = map[string]string{}, map[string]bool{}
	}
	if content(e) != c.last[e.Key] {
		c.offered[e.Key] = true
	}
}

func (c *consumer) apply(events []Event) {
	for _, e := range events {
		c.offer(&e)
		if !e.Resync && c.last[e.Key] == content(&e) && !c.offered[e.Key] {
			c.duplicates++
		}
		c.last[e.Key], c.offered[e.Key] = content(&e), false
		c.seen = append(c.seen, e)
		if e.Type == export.ChangeDelete {
			delete(c.state, e.Key)
		} else {
			c.state[e.Key] = string(e.Row.CanonicalJSON())
		}
	}
}

// sender delivers to the consumer; failAfter >= 0 acknowledges only that many events, then fails.
func (c *consumer) sender(failAfter int) SendFunc {
	return func(_ context.Context, events []Event) ([]bool, error) {
		acked := make([]bool, len(events))
		for i := range events {
			if failAfter >= 0 && i >= failAfter {
				for j := i; j < len(events); j++ {
					c.offer(&events[j]) // produced, maybe in flight: consumers may get it
				}
				return acked, errors.New("broker unreachable")
			}
			c.apply(events[i : i+1])
			acked[i] = true
		}
		return acked, nil
	}
}

func (c *consumer) equals(t *testing.T, snap *export.Snapshot) {
	t.Helper()
	if len(c.state) != len(snap.Rows) {
		t.Fatalf("consumer holds %d keys, snapshot %d", len(c.state), len(snap.Rows))
	}
	for i := range snap.Rows {
		r := &snap.Rows[i]
		if got := c.state[r.Key().String()]; got != string(r.CanonicalJSON()) {
			t.Fatalf("key %s: consumer holds %q, snapshot %q", r.Key(), got, r.CanonicalJSON())
		}
	}
}

func batch(prev, next *export.Snapshot) *sink.Batch {
	b := &sink.Batch{Diff: export.Compute(prev, next), Envelope: export.Envelope{Cluster: "c1", Inventory: "inv",
		Checksum: next.Checksum, Rows: next.Rows, ItemCount: len(next.Rows), ExportedAt: time.Unix(1, 0).UTC()}}
	if prev != nil {
		b.PreviousChecksum = prev.Checksum
	}
	return b
}

func snap(rows ...export.Row) *export.Snapshot { return export.NewSnapshot(rows) }

func TestIncrementalExportsSendOnlyChanges(t *testing.T) {
	buf, c := New(100), &consumer{state: map[string]string{}}
	s1 := snap(row("a", 1), row("b", 1))
	if err := buf.Export(t.Context(), batch(nil, s1), c.sender(-1)); err != nil {
		t.Fatal(err)
	}
	if len(c.seen) != 2 || !c.seen[0].Resync {
		t.Fatalf("first export: %+v, want 2 resync upserts", c.seen)
	}
	s2 := snap(row("a", 2), row("c", 1))
	c.seen = nil
	if err := buf.Export(t.Context(), batch(s1, s2), c.sender(-1)); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range c.seen {
		got = append(got, fmt.Sprintf("%s:%s:%t", e.Type, e.Row.UID, e.Resync))
	}
	if fmt.Sprint(got) != "[upsert:c:false upsert:a:false delete:b:false]" {
		t.Fatalf("events = %v", got)
	}
	c.seen = nil
	same := batch(s2, s2)
	if err := buf.Export(t.Context(), same, func(context.Context, []Event) ([]bool, error) {
		t.Fatal("send called for unchanged data")
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	c.equals(t, s2)
}

func TestRetryOfSameBatchSendsOnlyWhatIsOwed(t *testing.T) {
	buf, c := New(100), &consumer{state: map[string]string{}}
	s1 := snap(row("a", 1), row("b", 1), row("c", 1))
	b := batch(nil, s1)
	err := buf.Export(t.Context(), b, c.sender(1))
	if err == nil || sink.ClassOf(err) != sink.Transient {
		t.Fatalf("failed send: err = %v, want transient", err)
	}
	if s := buf.Stats(); s.Pending != 2 {
		t.Fatalf("pending = %d, want 2", s.Pending)
	}
	c.seen = nil
	if err := buf.Export(t.Context(), b, c.sender(-1)); err != nil {
		t.Fatal(err)
	}
	if len(c.seen) != 2 {
		t.Fatalf("retry sent %d events, want the 2 owed", len(c.seen))
	}
	if s := buf.Stats(); s.Pending != 0 || s.Delivered != 3 {
		t.Fatalf("stats after recovery = %+v", s)
	}
	c.equals(t, s1)
}

// TestCumulativeDiffAfterPartialDeliveryRepeatsNothing: the delivery worker diffs against the
// last snapshot the sink accepted, so after a partly delivered export the next batch asks
// again for what was delivered. The broker acknowledged those events: they are not sent again.
// Events still owed are sent as first staged (their observedAt kept), byte for byte.
func TestCumulativeDiffAfterPartialDeliveryRepeatsNothing(t *testing.T) {
	buf, c := New(100), &consumer{state: map[string]string{}}
	s1 := snap(row("a", 1), row("b", 1), row("c", 1), row("d", 1))
	if err := buf.Export(t.Context(), batch(nil, s1), c.sender(-1)); err != nil {
		t.Fatal(err)
	}
	s2 := snap(row("a", 2), row("b", 2), row("c", 2), row("d", 1))
	b2 := batch(s1, s2)
	if err := buf.Export(t.Context(), b2, c.sender(1)); err == nil {
		t.Fatal("the export that fails after one event succeeded")
	}
	first := map[string][]byte{}
	for _, e := range buf.invs[invKey{"c1", "inv"}].pending {
		first[e.Key], _ = e.Encode()
	}
	s3 := snap(row("a", 2), row("b", 2), row("c", 2), row("d", 3))
	b3 := batch(s1, s3) // cumulative: from what consumers hold entirely
	b3.Envelope.ExportedAt = time.Unix(2, 0).UTC()
	c.seen = nil
	if err := buf.Export(t.Context(), b3, c.sender(-1)); err != nil {
		t.Fatal(err)
	}
	var sent []string
	for _, e := range c.seen {
		sent = append(sent, e.Row.UID)
		if raw, ok := first[e.Key]; ok {
			if got, _ := e.Encode(); string(got) != string(raw) {
				t.Errorf("owed event of %s was re-sent as %s, first staged as %s", e.Row.UID, got, raw)
			}
		}
	}
	if want := []string{"b", "c", "d"}; !reflect.DeepEqual(sent, want) {
		t.Fatalf("sent %v after the partial delivery, want %v (a was acknowledged already)", sent, want)
	}
	if c.duplicates != 0 {
		t.Fatalf("%d duplicate deliveries", c.duplicates)
	}
	c.equals(t, s3)
}

// TestPeriodicResyncWhileOwedSendsWhatIsOwed: a periodic resync that comes while an outage
// keeps events owed delivers those events, as first staged, and nothing for rows consumers
// hold already. (It used to re-send every row, marked: on Kafka that came on top of the
// records of the attempt the outage met, and unchanged rows arrived twice.)
func TestPeriodicResyncWhileOwedSendsWhatIsOwed(t *testing.T) {
	buf, c := New(100), &consumer{state: map[string]string{}}
	s1 := snap(row("a", 1), row("b", 1), row("c", 1))
	if err := buf.Export(t.Context(), batch(nil, s1), c.sender(-1)); err != nil {
		t.Fatal(err)
	}
	s2 := snap(row("a", 2), row("b", 1), row("c", 1))
	if err := buf.Export(t.Context(), batch(s1, s2), c.sender(0)); err == nil {
		t.Fatal("the export during the outage succeeded")
	}
	owedFirst, _ := buf.invs[invKey{"c1", "inv"}].pending[0].Encode()
	for _, prev := range []*export.Snapshot{s1, s2} { // cumulative, and incremental from what is staged
		resync := batch(prev, s2)
		resync.Resync = true
		resync.Envelope.ExportedAt = time.Unix(2, 0).UTC()
		if err := buf.Export(t.Context(), resync, c.sender(0)); err == nil {
			t.Fatal("the resync during the outage succeeded")
		}
	}
	c.seen = nil
	resync := batch(s1, s2)
	resync.Resync = true
	resync.Envelope.ExportedAt = time.Unix(3, 0).UTC()
	if err := buf.Export(t.Context(), resync, c.sender(-1)); err != nil {
		t.Fatal(err)
	}
	if len(c.seen) != 1 || c.seen[0].Row.UID != "a" || c.seen[0].Resync {
		t.Fatalf("the resync after the outage sent %+v, want the owed upsert of a alone, unmarked", c.seen)
	}
	if got, _ := c.seen[0].Encode(); string(got) != string(owedFirst) {
		t.Errorf("the owed event was sent as %s, first staged as %s", got, owedFirst)
	}
	if s := buf.Stats(); s.Resyncs != 1 {
		t.Errorf("resyncs staged = %d, want 1 (the first, full export)", s.Resyncs)
	}
	c.equals(t, s2)
}

func TestOverflowFallsBackToMarkedResync(t *testing.T) {
	buf, c := New(2), &consumer{state: map[string]string{}}
	s1 := snap(row("a", 1), row("b", 1), row("gone", 1))
	if err := buf.Export(t.Context(), batch(nil, s1), c.sender(-1)); err != nil {
		t.Fatal(err)
	}
	s2 := snap(row("a", 2), row("b", 2), row("gone", 2), row("new", 1))
	err := buf.Export(t.Context(), batch(s1, s2), c.sender(0))
	if !errors.Is(err, ErrBufferFull) || sink.ClassOf(err) != sink.Transient {
		t.Fatalf("err = %v, want a transient ErrBufferFull", err)
	}
	if s := buf.Stats(); s.Pending != 0 || s.Overflows != 1 {
		t.Fatalf("stats after overflow = %+v", s)
	}
	s3 := snap(row("a", 3), row("b", 2), row("new", 1))
	c.seen = nil
	if err := buf.Export(t.Context(), batch(s1, s3), c.sender(-1)); err != nil {
		t.Fatal(err)
	}
	resyncs := 0
	for _, e := range c.seen {
		if e.Resync {
			resyncs++
		}
	}
	if resyncs != 3 {
		t.Fatalf("resync upserts = %d, want every row of the snapshot (3)", resyncs)
	}
	c.equals(t, s3)
}

// TestConvergesUnderRandomOutages drives both delivery styles (diff against the last accepted
// snapshot, and against the last attempted one) through random churn and partial failures:
// whatever happens, once an export succeeds the consumer holds exactly the snapshot.
func TestConvergesUnderRandomOutages(t *testing.T) {
	for _, cumulative := range []bool{true, false} {
		t.Run(fmt.Sprintf("cumulative=%t", cumulative), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, uint64(len(fmt.Sprint(cumulative)))))
			for round := range 50 {
				buf, c := New(5+rng.IntN(20)), &consumer{state: map[string]string{}}
				var accepted, attempted *export.Snapshot
				vals := map[string]int{}
				for step := range 30 {
					// Churn: change, add and remove a few of 20 possible keys.
					for range 1 + rng.IntN(6) {
						uid := fmt.Sprint(rng.IntN(20))
						if rng.IntN(3) == 0 {
							delete(vals, uid)
						} else {
							vals[uid] = rng.IntN(4)
						}
					}
					var rows []export.Row
					for uid, v := range vals {
						rows = append(rows, row(uid, v))
					}
					next := snap(rows...)
					prev := accepted
					if !cumulative && attempted != nil {
						prev = attempted
					}
					b := batch(prev, next)
					fail := -1
					if step < 29 && rng.IntN(2) == 0 {
						fail = rng.IntN(4)
					}
					for try := 0; ; try++ {
						err := buf.Export(t.Context(), b, c.sender(fail))
						attempted = next
						if err == nil {
							accepted = next
							c.equals(t, next)
							break
						}
						if try > 0 || rng.IntN(2) == 0 {
							break // a newer snapshot arrives before the broker returns
						}
						fail = -1 // the delivery worker retries the same batch after the outage
					}
				}
				if accepted != attempted {
					t.Fatalf("round %d: last export did not succeed", round)
				}
				if c.duplicates > 0 {
					t.Fatalf("round %d: %d events were delivered again although consumers held them", round, c.duplicates)
				}
			}
		})
	}
}

func TestChunksStayUnderLimitAndCarryNumbering(t *testing.T) {
	var rows []export.Row
	for i := range 200 {
		rows = append(rows, row(fmt.Sprint(i), i))
	}
	s := snap(rows...)
	env := &export.Envelope{Cluster: "c1", Inventory: "inv", Checksum: s.Checksum, Rows: s.Rows, ItemCount: len(s.Rows)}
	chunks, err := Chunks(env, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) < 5 {
		t.Fatalf("%d chunks for 200 rows at 4 KiB", len(chunks))
	}
	total := 0
	for i, ch := range chunks {
		if len(ch.Data) > 4096 {
			t.Errorf("chunk %d is %d bytes", i, len(ch.Data))
		}
		var doc struct {
			Chunk, Chunks int
			Checksum      string
			Rows          []export.Row
		}
		if err := json.Unmarshal(ch.Data, &doc); err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
		if doc.Chunk != i || doc.Chunks != len(chunks) || doc.Checksum != s.Checksum {
			t.Errorf("chunk %d header = %d/%d %s", i, doc.Chunk, doc.Chunks, doc.Checksum)
		}
		total += len(doc.Rows)
	}
	if total != 200 {
		t.Fatalf("chunks hold %d rows, want 200", total)
	}
	if _, err := Chunks(env, 1100); err == nil || sink.ClassOf(err) != sink.Terminal {
		t.Fatalf("a row over the limit: err = %v, want terminal", err)
	}
}

func TestEncodeMatchesEncodingJSON(t *testing.T) {
	r := row("u-1", 3)
	r.Name = `we"ird<name>ü`
	checkEncode(t, &r)
}

// checkEncode asserts that Encode yields, for both event types, the JSON document
// encoding/json yields for the change event, with the row byte for byte canonical (where
// encoding/json would escape '<' and '>' inside it).
func checkEncode(t *testing.T, r *export.Row) {
	t.Helper()
	for _, typ := range []export.ChangeType{export.ChangeUpsert, export.ChangeDelete} {
		e := Event{Type: typ, Row: r, Key: r.Key().String(), ObservedAt: time.Date(2026, 11, 30, 9, 0, 0, 123, time.UTC)}
		ce := e.ChangeEvent()
		want, err := json.Marshal(&ce)
		if err != nil {
			t.Fatal(err)
		}
		got, rowJSON := e.Encode()
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("Encode produced invalid JSON %q: %v", got, err)
		}
		_ = json.Unmarshal(want, &w)
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("Encode\n got %s\nwant %s", got, want)
		}
		if string(rowJSON) != string(r.CanonicalJSON()) {
			t.Fatalf("row part %s, canonical %s", rowJSON, r.CanonicalJSON())
		}
	}
}

// FuzzEncodeMatchesEncodingJSON: for arbitrary names and attributes, Encode yields the same
// JSON document as encoding/json does for the change event, with the row byte for byte in its
// canonical form. The seeds run with every `go test`.
func FuzzEncodeMatchesEncodingJSON(f *testing.F) {
	for _, s := range [][3]string{{"web", "shop", `{"v":1}`}, {`we"ird<name>ü`, "", `{"a":[1,"<&>",null]}`},
		{"\u2028\x00", "\\", `{"\u0000":{"\u00e9":1.5e300}}`}, {"", "", `{}`}} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, name, ns, attrs string) {
		var v map[string]any
		if json.Unmarshal([]byte(attrs), &v) != nil {
			return
		}
		raw, err := export.EncodeAttributes(v)
		if err != nil {
			return
		}
		r := export.Row{Origin: &export.Origin{Cluster: "c1", Inventory: "inv", Target: "t", Version: "v1", Kind: "Pod"}, Namespace: ns, Name: name, UID: name + "/" + ns, Attributes: raw}
		checkEncode(t, &r)
	})
}
