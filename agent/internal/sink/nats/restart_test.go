package nats

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/inventory/delivery"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
	"kollect.dev/api/v1alpha1"
)

// An agent restart: a new process builds a new sink and a new delivery worker that knows from
// the inventory's status only the checksum the sink accepted last. Its first batch has no
// baseline (a full diff): the first periodic resync when the data did not change, the first
// export when it did.

// layouts are the ways the sink knows what consumers hold after a restart: the key-value
// bucket; without one, the stream's state message and events; with a subject template
// without {kind}, which leaves the state no subject, the stream's events alone.
var layouts = []struct{ name, bucket, template string }{
	{"bucket", "b", ""},
	{"stream", "", ""},
	{"stream without kind", "", ".{cluster}.{inventory}.rows"},
}

// layoutSpec is the spec of a layout on stream name.
func layoutSpec(name, bucket, template string) (stream, kv string, sp func() *v1alpha1.KollectEventSinkSpec) {
	kv = ""
	if bucket != "" {
		kv = strings.ToLower(name)
	}
	return name, kv, func() *v1alpha1.KollectEventSinkSpec {
		s := spec(server.URL, name, kv)
		if template != "" {
			s.NATS.SubjectTemplate = name + template
		}
		return s
	}
}

// agentProcess starts a delivery worker on a new sink, as a process whose status names the
// snapshot last accepted (nil: none); stop ends it as SIGTERM does.
func agentProcess(t *testing.T, sp *v1alpha1.KollectEventSinkSpec, last *delivery.Job) (w *delivery.Worker, stop func()) {
	t.Helper()
	o := delivery.WorkerOptions{Name: "event/kollect/events", SinkType: "event/nats", Inventory: "kollect/pods", Sink: newSink(t, sp, defaultEnv),
		Timeout: 20 * time.Second, Metrics: delivery.NewMetrics(prometheus.NewRegistry()), Log: testr.New(t)}
	if last != nil {
		o.Accepted, o.AcceptedRows, o.AcceptedCoverage = last.Snapshot.Checksum, last.Snapshot.Len(), last.CoverageDigest
	}
	w = delivery.NewWorker(o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return w, stop
}

// settled waits until the worker's sink accepted checksum, and its last call returned: the
// first call of a restarted worker whose status names checksum already.
func settled(t *testing.T, w *delivery.Worker, checksum string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st := w.Status()
		if st.LastError != "" {
			t.Fatalf("export failed: %s", st.LastError)
		}
		if st.Checksum == checksum && !st.LastAttempt.IsZero() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sink did not accept %s: %+v", export.ShortChecksum(checksum), st)
		}
	}
}

func podJob(s *export.Snapshot) *delivery.Job {
	cov := []export.Coverage{sinktest.Complete("pods", int64(s.Len()))}
	return &delivery.Job{Snapshot: s, Cluster: "c1", Inventory: "pods", Writer: export.Writer{Version: "v1.0.0", Instance: "kollect@c1"},
		Complete: true, Coverage: cov, CoverageDigest: export.CoverageDigest(cov)}
}

// restartRows are 40 rows, and the same with five changed and two deleted, and those seven.
func restartRows() (before, after *export.Snapshot, changed, deleted []export.Row) {
	var a, b []export.Row
	for i := range 40 {
		a = append(a, row(fmt.Sprint(i), 1))
		switch {
		case i%8 == 3:
			b = append(b, row(fmt.Sprint(i), 2))
			changed = append(changed, b[len(b)-1])
		case i == 12 || i == 33:
			deleted = append(deleted, a[i])
		default:
			b = append(b, row(fmt.Sprint(i), 1))
		}
	}
	order := func(a, b export.Row) int { return export.Compare(&a, &b) }
	slices.SortFunc(changed, order)
	slices.SortFunc(deleted, order)
	return export.NewSnapshot(a), export.NewSnapshot(b), changed, deleted
}

// counters are what the server says of the stream and the bucket's stream: message counts
// and last sequences.
func counters(t *testing.T, c *client, stream, bucket string) [4]uint64 {
	t.Helper()
	var out [4]uint64
	out[0], out[1] = c.streamState(t, stream)
	if bucket != "" {
		out[2], out[3] = c.streamState(t, "KV_"+bucket)
	}
	return out
}

// TestRestartSendsOnlyTheChanges, against nats-server with JetStream, for each layout: the
// agent exports 40 rows and stops. A restarted agent with unchanged data publishes nothing at
// its first periodic resync: the stream's and the bucket's message counts and last sequences
// are the same before it started and after the sink returned from that resync. Five rows
// change and two are deleted while the next restart is down: it publishes exactly those seven
// events, the five upserts then the two deletes, each in canonical order, without the resync
// mark, then the state message; the bucket gets five puts and two delete markers. A restart
// after it, with unchanged data, publishes nothing again.
func TestRestartSendsOnlyTheChanges(t *testing.T) {
	for i, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			stream, bucket, sp := layoutSpec(fmt.Sprintf("RESTART%d", i), l.bucket, l.template)
			c := dial(t, server.URL)
			s1, s2, changed, deleted := restartRows()
			j1, j2 := podJob(s1), podJob(s2)
			w, stop := agentProcess(t, sp(), nil)
			w.Offer(j1)
			settled(t, w, s1.Checksum)
			stop()

			unchanged := func(last *delivery.Job) {
				t.Helper()
				before := counters(t, c, stream, bucket)
				w, stop := agentProcess(t, sp(), last)
				resync := podJob(last.Snapshot)
				resync.Resync = true
				w.Offer(resync)
				settled(t, w, last.Snapshot.Checksum)
				stop()
				if after := counters(t, c, stream, bucket); after != before {
					t.Fatalf("a restart with unchanged data published: stream and bucket (messages, last sequence) %v → %v", before, after)
				}
				t.Logf("restart with unchanged data (%d rows): stream and bucket (messages, last sequence) %v before and after its first resync",
					last.Snapshot.Len(), before)
			}
			unchanged(j1)

			before := counters(t, c, stream, bucket)
			w, stop = agentProcess(t, sp(), j1)
			w.Offer(j2)
			settled(t, w, s2.Checksum)
			stop()
			var want []string
			for _, r := range changed {
				want = append(want, "upsert "+r.Key().String()+" "+string(r.CanonicalJSON()))
			}
			for _, r := range deleted {
				want = append(want, "delete "+r.Key().String()+" "+string(r.CanonicalJSON()))
			}
			if l.template == "" {
				want = append(want, "state")
			}
			var got []string
			for _, m := range c.allMessages(t, stream) {
				if m.Sequence <= before[1] {
					continue
				}
				if m.Header.Get(hResync) != "" {
					t.Errorf("message %d carries the resync mark: a restart sends changes, not a resync", m.Sequence)
				}
				if m.Header.Get(hEvent) == evState {
					got = append(got, "state")
					continue
				}
				ev := decode(t, m)
				got = append(got, string(ev.Type)+" "+ev.Key+" "+string(ev.Row.CanonicalJSON()))
			}
			if !slices.Equal(got, want) {
				t.Fatalf("the restart after 5 changes and 2 deletes published:\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
			after := counters(t, c, stream, bucket)
			if bucket != "" && after[3]-before[3] != 7 {
				t.Errorf("the bucket's stream went from sequence %d to %d, want 7 more (5 puts, 2 delete markers)", before[3], after[3])
			}
			assertState(t, "stream", fold(t, c.messages(t, stream)), s2)
			if bucket != "" {
				assertState(t, "bucket", c.bucket(t, bucket), s2)
			}
			t.Logf("restart after 5 changes and 2 deletes: %d stream messages (%v → %v)", len(got), before, after)
			unchanged(j2)
		})
	}
}

// TestRestartAfterAnUnfinishedExport, against nats-server with JetStream, for each layout: the
// agent stops in the middle of an export, after its events (five upserts, two deletes)
// reached the stream and before the state message, and the data returns to the snapshot the
// state names. The state then is no account of what consumers hold: the restarted sink's
// confirmation is not held, and its first resync publishes the seven rows the unfinished
// export touched, as they are, and nothing else; stream and bucket end equal to the snapshot.
func TestRestartAfterAnUnfinishedExport(t *testing.T) {
	for i, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			ctx := t.Context()
			stream, bucket, sp := layoutSpec(fmt.Sprintf("UNFINISHED%d", i), l.bucket, l.template)
			s1, s2, _, _ := restartRows()
			writer := export.Writer{Version: "v1.0.0", Instance: "kollect@c1"}
			first := newSink(t, sp(), defaultEnv)
			ex := exporter{Writer: writer}
			if err := ex.Export(ctx, first, s1); err != nil {
				t.Fatal(err)
			}
			if err := first.buf.Export(ctx, ex.Batch(s2), first.send); err != nil { // the events, not the state
				t.Fatal(err)
			}
			first.Close()

			restarted := newSink(t, sp(), defaultEnv)
			err := restarted.Confirm(ctx, sink.Confirmation{Cluster: "c1", Inventory: "pods", Checksum: s1.Checksum, Writer: writer, At: time.Now()})
			if l.template == "" && (!errors.Is(err, sink.ErrNotHeld) || !strings.Contains(err.Error(), "did not finish")) {
				t.Fatalf("confirming the state's snapshot after an unfinished export: %v, want not held", err)
			}
			c := dial(t, server.URL)
			before := counters(t, c, stream, bucket)
			resync := exporter{Gen: 10, Writer: writer}
			b := resync.Batch(s1)
			b.PreviousChecksum, b.Resync = s1.Checksum, true
			if err := restarted.Export(ctx, b); err != nil {
				t.Fatal(err)
			}
			touched := map[string]bool{}
			for _, m := range c.allMessages(t, stream) {
				if m.Sequence <= before[1] {
					continue
				}
				if ev := decode(t, m); ev.Type != export.ChangeUpsert || touched[ev.Key] {
					t.Errorf("message %d after the unfinished export: %s %s, want one upsert per row touched", m.Sequence, ev.Type, ev.Key)
				} else {
					touched[ev.Key] = true
				}
			}
			if want := 7; len(touched) != want {
				t.Errorf("the restart published %d upserts (%v), want the %d rows the unfinished export touched", len(touched), slices.Sorted(maps.Keys(touched)), want)
			}
			assertState(t, "stream", fold(t, c.messages(t, stream)), s1)
			if bucket != "" {
				assertState(t, "bucket", c.bucket(t, bucket), s1)
			}
		})
	}
}
