package nats

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/eventbuf"
	"kollect.dev/agent/internal/sink/sinktest"
	"kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

func TestChangesInOrderPerKeyWithHeadersAndBucket(t *testing.T) {
	ctx := t.Context()
	sk := newSink(t, spec(server.URL, "CHANGES", "changes"), defaultEnv)
	var ex exporter
	s1 := export.NewSnapshot([]export.Row{row("a", 1), row("b", 1)})
	s2 := export.NewSnapshot([]export.Row{row("a", 2), row("b", 1)})
	s3 := export.NewSnapshot([]export.Row{row("a", 2)})
	for _, s := range []*export.Snapshot{s1, s2, s3} {
		if err := ex.Export(ctx, sk, s); err != nil {
			t.Fatal(err)
		}
	}
	c := dial(t, server.URL)
	msgs := c.messages(t, "CHANGES")
	perKey := map[string][]string{}
	for _, m := range msgs {
		ev := decode(t, m)
		if m.Subject != "CHANGES.c1.pods.Pod" {
			t.Errorf("subject %s", m.Subject)
		}
		if m.Header.Get(hSchema) != export.SchemaVersion || m.Header.Get(hCluster) != "c1" ||
			m.Header.Get(hInventory) != "pods" || m.Header.Get(hKey) != ev.Key || m.Header.Get("Nats-Msg-Id") == "" {
			t.Errorf("headers %v", m.Header)
		}
		v, _ := ev.Row.AttributeMap()
		perKey[ev.Key] = append(perKey[ev.Key], fmt.Sprintf("%s:%s:v%v:resync=%s", ev.Type, m.Header.Get(hEvent), v["v"], m.Header.Get(hResync)))
	}
	// The first export: the stream holds nothing of the inventory, so every row is new to
	// consumers (no resync mark).
	if got, want := strings.Join(perKey["c1/pods/pods/a"], " "), "upsert:upsert:v1:resync= upsert:upsert:v2:resync="; got != want {
		t.Errorf("key a:\n got %s\nwant %s", got, want)
	}
	if got, want := strings.Join(perKey["c1/pods/pods/b"], " "), "upsert:upsert:v1:resync= delete:delete:v1:resync="; got != want {
		t.Errorf("key b:\n got %s\nwant %s", got, want)
	}
	assertState(t, "stream", fold(t, msgs), s3)
	assertState(t, "bucket", c.bucket(t, "changes"), s3)

	// Static data: the same snapshot again publishes nothing.
	before := c.count(t, "CHANGES")
	if err := ex.Export(ctx, sk, s3); err != nil {
		t.Fatal(err)
	}
	if after := c.count(t, "CHANGES"); after != before {
		t.Fatalf("unchanged data published messages: %d → %d", before, after)
	}
}

// TestDuplicatePublishIsDeduplicated publishes the same events through two sinks, as a retry
// after a lost acknowledgement does (its Nats-Msg-Ids repeat): the stream stores them once.
func TestDuplicatePublishIsDeduplicated(t *testing.T) {
	s := export.NewSnapshot([]export.Row{row("a", 1), row("b", 2), row("c", 3)})
	var events []eventbuf.Event
	for i := range s.Rows {
		events = append(events, eventbuf.Event{Type: export.ChangeUpsert, Row: &s.Rows[i], Key: s.Rows[i].Key().String(),
			ObservedAt: time.Unix(1_800_000_000, 0).UTC()})
	}
	for range 2 {
		sk := newSink(t, spec(server.URL, "DEDUP", ""), defaultEnv)
		if err := sk.ensureStream(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, err := sk.send(t.Context(), events); err != nil {
			t.Fatal(err)
		}
	}
	if n := dial(t, server.URL).count(t, "DEDUP"); n != 3 {
		t.Fatalf("stream holds %d messages after a duplicate publish of 3 events, want 3", n)
	}
}

// TestOutageDeliversEverythingOnRecovery freezes the server while several exports run, then
// thaws it: every export during the outage fails transiently, the delivery worker's retry delivers,
// and both the stream's folded state and the bucket equal the last snapshot.
// outages are the two ways a server goes away: frozen (SIGSTOP: connections hang) and stopped
// (a clean shutdown: the client is disconnected and publishes fail at once).
var outages = []struct {
	name     string
	down, up func(*testenv.NATS) error
}{
	{"frozen", func(s *testenv.NATS) error { return s.Signal(syscall.SIGSTOP) }, func(s *testenv.NATS) error { return s.Signal(syscall.SIGCONT) }},
	{"stopped", func(s *testenv.NATS) error { return s.Halt() }, func(s *testenv.NATS) error { return s.Resume() }},
}

func TestOutageDeliversEverythingOnRecovery(t *testing.T) {
	for _, outage := range outages {
		for _, bufferSize := range []int32{100_000, 100} {
			t.Run(fmt.Sprint(outage.name, "/bufferSize=", bufferSize), func(t *testing.T) {
				srv, err := testenv.StartNATS(testenv.NATSOptions{})
				if err != nil {
					t.Fatal(err)
				}
				defer srv.Stop()
				sp := spec(srv.URL, "OUTAGE", "outage")
				sp.BufferSize = bufferSize
				sk := newSink(t, sp, defaultEnv)
				// As the agent does, the exports name their writer: each one checks the state
				// first (see writers.go), also while the server is away.
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
				if err := outage.down(srv); err != nil {
					t.Fatal(err)
				}
				if outage.name == "stopped" {
					// Let the client fail a reconnect, so the exports can say why it is away.
					for deadline := time.Now().Add(10 * time.Second); sk.dial.get() == nil; {
						if time.Now().After(deadline) {
							t.Fatal("the client never reported a failed reconnect")
						}
						time.Sleep(20 * time.Millisecond)
					}
				}
				var last *export.Snapshot
				full := false
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
					ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
					err := ex.Export(ctx, sk, last)
					cancel()
					if err == nil || sink.ClassOf(err) != sink.Transient {
						t.Fatalf("export during the outage: %v, want a transient error", err)
					}
					if outage.name == "stopped" && !strings.Contains(err.Error(), "connection refused") {
						t.Fatalf("export to a stopped server: %v, want it to say the connection was refused", err)
					}
					full = full || errors.Is(err, eventbuf.ErrBufferFull)
				}
				if want := bufferSize < 300; full != want {
					t.Fatalf("buffer full reported = %v, want %v", full, want)
				}
				if err := outage.up(srv); err != nil {
					t.Fatal(err)
				}
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
				c := dial(t, srv.URL)
				assertState(t, "stream", fold(t, c.messages(t, "OUTAGE")), last)
				assertState(t, "bucket", c.bucket(t, "outage"), last)
			})
		}
	}
}

func TestCredentials(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   testenv.NATSOptions
		secret map[string][]byte
		bad    map[string][]byte
	}{
		{"user", testenv.NATSOptions{User: "kollect", Password: "s3cret"},
			map[string][]byte{"user": []byte("kollect"), "password": []byte("s3cret")},
			map[string][]byte{"user": []byte("kollect"), "password": []byte("wrong")}},
		{"token", testenv.NATSOptions{Token: "t0ken"},
			map[string][]byte{"token": []byte("t0ken")}, map[string][]byte{"token": []byte("nope")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, err := testenv.StartNATS(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Stop()
			sp := spec(srv.URL, "AUTH", "")
			sp.NATS.SecretRef = &v1alpha1.SecretReference{Name: "nats"}
			ok := newSink(t, sp, sink.Env{Cluster: "c1", Secrets: sinktest.Secrets(map[string]map[string][]byte{"nats": tc.secret})})
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			if err := ok.Probe(ctx); err != nil {
				t.Fatalf("probe with good credentials: %v", err)
			}
			var ex exporter
			if err := ex.Export(ctx, ok, export.NewSnapshot([]export.Row{row("a", 1)})); err != nil {
				t.Fatal(err)
			}
			bad := newSink(t, sp, sink.Env{Cluster: "c1", Secrets: sinktest.Secrets(map[string]map[string][]byte{"nats": tc.bad})})
			if err := bad.Probe(ctx); err == nil || sink.ClassOf(err) != sink.Terminal {
				t.Fatalf("probe with bad credentials: %v, want terminal", err)
			}
		})
	}
}

func TestProbeAndPreview(t *testing.T) {
	sp := spec(server.URL, "ABSENT", "latest")
	sp.NATS.CreateStream = false
	sk := newSink(t, sp, defaultEnv)
	if err := sk.Probe(t.Context()); err == nil || sink.ClassOf(err) != sink.Terminal {
		t.Fatalf("probe of a missing stream without createStream: %v, want terminal", err)
	}
	if err := newSink(t, spec(server.URL, "ABSENT", "latest"), defaultEnv).Probe(t.Context()); err != nil {
		t.Fatalf("probe of a creatable stream: %v", err)
	}
	p, err := sk.Preview(t.Context(), "c1", "pods")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Paths) != 2 || p.Paths[0] != "ABSENT.c1.pods.{kind}" {
		t.Errorf("preview paths = %v", p.Paths)
	}
	for _, want := range []string{"Kollect-Key=c1/pods/<target>/<uid>", hSchema + "=" + export.SchemaVersion, "Nats-Msg-Id", "latest"} {
		if !strings.Contains(p.Message, want) {
			t.Errorf("preview %q lacks %q", p.Message, want)
		}
	}
	if _, err := dial(t, server.URL).js.Stream(t.Context(), "ABSENT"); err == nil {
		t.Fatal("probe or preview created the stream")
	}
}

func TestSnapshotModePublishesNumberedChunks(t *testing.T) {
	sp := spec(server.URL, "SNAP", "")
	sp.Mode = "snapshot"
	sk := newSink(t, sp, defaultEnv)
	var rows []export.Row
	for i := range 6000 {
		rows = append(rows, row(fmt.Sprint(i), i))
	}
	s := export.NewSnapshot(rows)
	var ex exporter
	if err := ex.Export(t.Context(), sk, s); err != nil {
		t.Fatal(err)
	}
	msgs := dial(t, server.URL).messages(t, "SNAP")
	if len(msgs) < 2 {
		t.Fatalf("%d chunks for ~1.2 MB at a 1 MiB payload limit", len(msgs))
	}
	total := 0
	for i, m := range msgs {
		if m.Subject != "SNAP.c1.pods._snapshot" || m.Header.Get(hChecksum) != s.Checksum ||
			m.Header.Get(hChunk) != fmt.Sprintf("%d/%d", i, len(msgs)) {
			t.Errorf("chunk %d: subject %s headers %v", i, m.Subject, m.Header)
		}
		total += strings.Count(string(m.Data), `"uid":`)
	}
	if total != len(rows) {
		t.Fatalf("chunks hold %d rows, want %d", total, len(rows))
	}
}
