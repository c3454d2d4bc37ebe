package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/eventbuf"
	"kollect.dev/testenv"
)

func TestChangesArriveInOrderPerKeyWithTombstones(t *testing.T) {
	ctx := t.Context()
	sk := newSink(t, spec(broker.Addr, "changes"), sink.Env{})
	var ex exporter
	s1 := export.NewSnapshot([]export.Row{row("a", 1), row("b", 1)})
	s2 := export.NewSnapshot([]export.Row{row("a", 2), row("b", 1)})
	s3 := export.NewSnapshot([]export.Row{row("a", 2)})
	for _, s := range []*export.Snapshot{s1, s2, s3} {
		if err := ex.Export(ctx, sk, s); err != nil {
			t.Fatal(err)
		}
	}
	byKey := kcat(t, broker.Addr, "changes")
	describe := func(key string) string {
		var out []string
		for _, m := range byKey[key] {
			if m.Payload == nil {
				out = append(out, "tombstone:"+m.header(hEvent))
				continue
			}
			ev := m.event(t)
			if ev.Key != key || ev.SchemaVersion != export.SchemaVersion || ev.Cluster != "c1" || ev.Inventory != "pods" {
				t.Errorf("event %+v does not match key %s", ev, key)
			}
			if m.header(hSchema) != export.SchemaVersion || m.header(hCluster) != "c1" || m.header(hInventory) != "pods" {
				t.Errorf("headers %v", m.Headers)
			}
			v, _ := ev.Row.AttributeMap()
			out = append(out, fmt.Sprintf("%s:%s:v%v:resync=%s", ev.Type, m.header(hEvent), v["v"], m.header(hResync)))
		}
		return strings.Join(out, " ")
	}
	// The first export: the topic holds nothing of the inventory, so every row is new to
	// consumers (no resync mark).
	if got, want := describe("c1/pods/pods/a"), "upsert:upsert:v1:resync= upsert:upsert:v2:resync="; got != want {
		t.Errorf("key a:\n got %s\nwant %s", got, want)
	}
	if got, want := describe("c1/pods/pods/b"), "upsert:upsert:v1:resync= delete:delete:v1:resync= tombstone:delete"; got != want {
		t.Errorf("key b:\n got %s\nwant %s", got, want)
	}
	assertState(t, compacted(t, byKey), s3)

	// Static data: the delivery worker hands the same snapshot again; nothing is produced.
	before := endOffsets(t, "changes")
	if err := ex.Export(ctx, sk, s3); err != nil {
		t.Fatal(err)
	}
	if after := endOffsets(t, "changes"); after != before {
		t.Fatalf("unchanged data produced records: end offsets %d → %d", before, after)
	}
}

func endOffsets(t testing.TB, topic string) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker.Addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	offs, err := kadm.NewClient(cl).ListEndOffsets(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	offs.Each(func(o kadm.ListedOffset) { sum += o.Offset })
	return sum
}

func TestCreatedTopicIsCompacted(t *testing.T) {
	sk := newSink(t, spec(broker.Addr, "created"), sink.Env{})
	if err := sk.Probe(t.Context()); err != nil {
		t.Fatalf("probe of a creatable topic: %v", err)
	}
	var ex exporter
	if err := ex.Export(t.Context(), sk, export.NewSnapshot([]export.Row{row("a", 1)})); err != nil {
		t.Fatal(err)
	}
	configs, err := sk.admin.DescribeTopicConfigs(t.Context(), "created")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := configs.On("created", nil)
	if err != nil {
		t.Fatal(err)
	}
	policy := ""
	for _, c := range rc.Configs {
		if c.Key == "cleanup.policy" && c.Value != nil {
			policy = *c.Value
		}
	}
	if policy != "compact" {
		t.Fatalf("cleanup.policy = %q, want compact", policy)
	}
}

func TestProbeAndPreview(t *testing.T) {
	sp := spec(broker.Addr, "absent")
	sp.Kafka.CreateTopic = false
	sk := newSink(t, sp, sink.Env{})
	if err := sk.Probe(t.Context()); err == nil || sink.ClassOf(err) != sink.Terminal {
		t.Fatalf("probe of a missing topic without createTopic: %v, want terminal", err)
	}
	p, err := sk.Preview(t.Context(), "c1", "pods")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"c1/pods/<target>/<uid>", hSchema + "=" + export.SchemaVersion, hEvent, "tombstone"} {
		if !strings.Contains(p.Message, want) {
			t.Errorf("preview %q lacks %q", p.Message, want)
		}
	}
	if len(p.Paths) != 1 || p.Paths[0] != "absent" {
		t.Errorf("preview paths = %v", p.Paths)
	}
	if got := endOffsets(t, "absent"); got != 0 {
		t.Fatalf("probe or preview wrote %d records", got)
	}
	down := spec("127.0.0.1:1", "x")
	down.Timeout.Duration = time.Second
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if err := newSink(t, down, sink.Env{}).Probe(ctx); err == nil || sink.ClassOf(err) != sink.Transient {
		t.Fatalf("probe of an unreachable broker: %v, want transient", err)
	}
}

// TestOutageDeliversEverythingOnRecovery freezes the broker while several exports run, as a
// broker outage looks to a client, then thaws it: every export during the outage fails
// transiently, the delivery worker's retry delivers, and the compacted state equals the last
// snapshot. With a small buffer the overflow is reported and a resync delivers instead.
// outages are the two ways a broker goes away: frozen (SIGSTOP: requests hang) and stopped (a
// clean shutdown: connections are refused).
var outages = []struct {
	name     string
	down, up func(*testenv.Kafka) error
}{
	{"frozen", func(k *testenv.Kafka) error { return k.Signal(syscall.SIGSTOP) }, func(k *testenv.Kafka) error { return k.Signal(syscall.SIGCONT) }},
	{"stopped", func(k *testenv.Kafka) error { return k.Halt() }, func(k *testenv.Kafka) error { return k.Resume() }},
}

func TestOutageDeliversEverythingOnRecovery(t *testing.T) {
	for _, outage := range outages {
		for _, bufferSize := range []int32{100_000, 100} {
			t.Run(fmt.Sprint(outage.name, "/bufferSize=", bufferSize), func(t *testing.T) {
				testOutage(t, bufferSize, outage.down, outage.up, outage.name == "stopped")
			})
		}
	}
}

// testOutage churns four rounds while the broker is down. A stopped broker is noticed: the
// export fails with the refused connection long before its deadline.
func testOutage(t *testing.T, bufferSize int32, down, up func(*testenv.Kafka) error, refused bool) {
	{
		{
			k, err := testenv.StartKafka(testenv.KafkaOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer k.Stop()
			sp := spec(k.Addr, "outage")
			sp.BufferSize = bufferSize
			sk := newSink(t, sp, sink.Env{})
			// As the agent does, the exports name their writer: each one checks the state
			// record first (see writers.go), also while no broker answers.
			ex := exporter{Writer: export.Writer{Version: "v1.0.0", Instance: "kollect@outage"}}
			vals := map[string]int{}
			snapshot := func() *export.Snapshot {
				var rows []export.Row
				for uid, v := range vals {
					rows = append(rows, row(uid, v))
				}
				return export.NewSnapshot(rows)
			}
			for i := range 300 {
				vals[fmt.Sprint(i)] = 0
			}
			if err := ex.Export(t.Context(), sk, snapshot()); err != nil {
				t.Fatal(err)
			}
			if err := down(k); err != nil {
				t.Fatal(err)
			}
			var last *export.Snapshot
			var full bool
			for round := 1; round <= 4; round++ {
				for i := range 300 {
					switch uid := fmt.Sprint(i); {
					case i%7 == round:
						delete(vals, uid)
					case i%3 == round%3:
						vals[uid] = round
					}
				}
				vals[fmt.Sprint("new-", round)] = round
				last = snapshot()
				deadline := 300 * time.Millisecond
				if refused {
					deadline = time.Minute // the refused connection must be noticed well before
				}
				ctx, cancel := context.WithTimeout(t.Context(), deadline)
				started := time.Now()
				err := ex.Export(ctx, sk, last)
				cancel()
				// Printed on failure only: which attempt handed records to the client, and
				// whether the sink then held the next ones back.
				t.Logf("round %d (observedAt %s): %v after %v; no broker answered: %v; records in the client: %d",
					round, time.Unix(1_800_000_000+ex.Gen, 0).UTC().Format(time.RFC3339),
					err, time.Since(started).Round(time.Millisecond), sk.unanswered.Load(), unresolved(sk))
				if err == nil || sink.ClassOf(err) != sink.Transient {
					t.Fatalf("export during the outage: %v, want a transient error", err)
				}
				if refused && (errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "connection refused")) {
					t.Fatalf("export to a stopped broker: %v, want it to fail on the refused connection", err)
				}
				full = full || errors.Is(err, eventbuf.ErrBufferFull)
			}
			if want := bufferSize < 300; full != want {
				t.Fatalf("buffer full reported = %v, want %v", full, want)
			}
			if st, want := sk.BufferStats(), bufferSize >= 300; (st.Pending > 0) != want {
				t.Fatalf("pending = %d during the outage with bufferSize %d", st.Pending, bufferSize)
			}
			if err := up(k); err != nil {
				t.Fatal(err)
			}
			// The delivery worker retries the last batch with backoff until it succeeds.
			var err2 error
			for try := 0; try < 20; try++ {
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				err2 = ex.Export(ctx, sk, last)
				cancel()
				if err2 == nil {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			if err2 != nil {
				t.Fatalf("export after recovery: %v", err2)
			}
			if st := sk.BufferStats(); st.Pending != 0 {
				t.Fatalf("pending after recovery = %d", st.Pending)
			}
			byKey := kcat(t, k.Addr, "outage")
			assertState(t, compacted(t, byKey), last)
			assertNoDuplicates(t, byKey)
			assertNoLaterAttempt(t, byKey)
		}
	}
}

// unresolved counts the events whose records are still in the client, neither acknowledged
// nor failed.
func unresolved(sk *Sink) int {
	n := 0
	for _, f := range sk.flights {
		if resolved, _ := f.state(); !resolved {
			n++
		}
	}
	return n
}

// assertNoLaterAttempt fails when a row's value of round 2 or 3 arrived and was not its
// final state: only the export that met the outage (round 1) may have handed records to the
// client, the attempts after it wait for a broker to answer (events.md, "Latest state").
func assertNoLaterAttempt(t *testing.T, byKey map[string][]message) {
	t.Helper()
	late := 0
	for key, msgs := range byKey {
		final := -1
		for i := range msgs {
			if msgs[i].Payload != nil {
				final = i
			}
		}
		for i := 0; i < final; i++ {
			m := &msgs[i]
			if m.Payload == nil {
				continue
			}
			ev := m.event(t)
			if ev.Type != export.ChangeUpsert {
				continue
			}
			if json := string(ev.Row.CanonicalJSON()); strings.Contains(json, `"v":2`) || strings.Contains(json, `"v":3`) {
				late++
				t.Errorf("key %s: record at %d/%d (observedAt %s, resync %q) holds the intermediate value of a later attempt: %s",
					key, m.Partition, m.Offset, ev.ObservedAt.Format(time.RFC3339), m.header(hResync), json)
			}
		}
	}
	if late > 0 {
		t.Fatalf("%d records of attempts made while no broker answered", late)
	}
}

// assertNoDuplicates fails when a key's events repeat: the same record value twice (a record
// of a failed attempt delivered late and produced again), or an unmarked event saying what the
// key's previous event said. The churn of the outage test never returns a row to an earlier
// content, so every event of a key says something new.
func assertNoDuplicates(t *testing.T, byKey map[string][]message) {
	t.Helper()
	dups := 0
	for key, msgs := range byKey {
		seen := map[string]bool{}
		prev := ""
		for i := range msgs {
			m := &msgs[i]
			if m.Payload == nil {
				continue // the tombstone after a delete event
			}
			if seen[*m.Payload] {
				dups++
				t.Errorf("key %s: record at offset %d repeats an earlier record byte for byte", key, m.Offset)
			}
			seen[*m.Payload] = true
			ev := m.event(t)
			said := string(ev.Type) + string(ev.Row.CanonicalJSON())
			if said == prev && m.header("kollect-resync") == "" {
				dups++
				t.Errorf("key %s: record at offset %d says again what the key's previous event said", key, m.Offset)
			}
			prev = said
		}
	}
	if dups > 0 {
		t.Fatalf("%d duplicate deliveries after the outage", dups)
	}
}

func TestSnapshotModeChunksUnderMessageLimit(t *testing.T) {
	k, err := testenv.StartKafka(testenv.KafkaOptions{MaxMessageBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	sp := spec(k.Addr, "snapshots")
	sp.Mode = "snapshot"
	sk := newSink(t, sp, sink.Env{})
	var rows []export.Row
	for i := range 2000 {
		rows = append(rows, row(fmt.Sprint(i), i))
	}
	s := export.NewSnapshot(rows)
	var ex exporter
	if err := ex.Export(t.Context(), sk, s); err != nil {
		t.Fatal(err)
	}
	byKey := kcat(t, k.Addr, "snapshots")
	if len(byKey) < 3 {
		t.Fatalf("%d chunks for ~400 KB at a 64 KiB limit", len(byKey))
	}
	total := 0
	for key, msgs := range byKey {
		m := msgs[0]
		if len(*m.Payload) > 64<<10 || m.header(hResync) != "true" || m.header(hChecksum) != s.Checksum {
			t.Errorf("chunk %s: %d bytes, headers %v", key, len(*m.Payload), m.Headers)
		}
		if !strings.HasSuffix(m.header(hChunk), fmt.Sprintf("/%d", len(byKey))) {
			t.Errorf("chunk %s numbered %s of %d", key, m.header(hChunk), len(byKey))
		}
		total += strings.Count(*m.Payload, `"uid":`)
	}
	if total != 2000 {
		t.Fatalf("chunks hold %d rows, want 2000", total)
	}
	if err := ex.Export(t.Context(), sk, s); err != nil {
		t.Fatal(err)
	}
	if n := len(kcat(t, k.Addr, "snapshots")["c1/pods/snapshot/0"]); n != 1 {
		t.Fatalf("unchanged snapshot produced again (%d records for chunk 0)", n)
	}
}
