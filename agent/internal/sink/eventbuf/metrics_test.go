package eventbuf

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"kollect.dev/agent/internal/sink"
)

type fakeReporter struct{ st Stats }

func (f *fakeReporter) Export(context.Context, *sink.Batch) error { return nil }
func (f *fakeReporter) Probe(context.Context) error               { return nil }
func (f *fakeReporter) Preview(context.Context, string, string) (sink.Preview, error) {
	return sink.Preview{}, nil
}
func (f *fakeReporter) Close() error       { return nil }
func (f *fakeReporter) BufferStats() Stats { return f.st }

// TestBufferMetricsFollowLiveSinks checks the collector sums the buffers of live sinks by
// sink name and forgets a sink once it is closed. (The buffers themselves are tested against
// real brokers in the kafka and nats packages.)
func TestBufferMetricsFollowLiveSinks(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics()
	reg.MustRegister(m)
	a := m.Track(&fakeReporter{st: Stats{Pending: 3, Overflows: 1, Delivered: 10}}, sink.Env{Namespace: "ns", Name: "bus"})
	b := m.Track(&fakeReporter{st: Stats{Pending: 2, Delivered: 5}}, sink.Env{Namespace: "ns", Name: "bus"})
	want := "# HELP kollect_event_buffer_pending Change events owed to an event sink's broker.\n# TYPE kollect_event_buffer_pending gauge\nkollect_event_buffer_pending{sink=\"ns/bus\"} 5\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kollect_event_buffer_pending"); err != nil {
		t.Fatal(err)
	}
	_ = a.Close()
	_ = b.Close()
	if n := testutil.CollectAndCount(m); n != 0 {
		t.Fatalf("%d series after every sink closed", n)
	}
}

type fakeConfirmPurger struct{ fakeReporter }

func (f *fakeConfirmPurger) Confirm(context.Context, sink.Confirmation) error { return nil }
func (f *fakeConfirmPurger) Holdings(context.Context, string, string) ([]sink.Holding, error) {
	return nil, nil
}
func (f *fakeConfirmPurger) Purge(context.Context, string, string, time.Time) ([]sink.Holding, error) {
	return nil, nil
}

// TestTrackKeepsOptionalInterfaces: the delivery worker finds sink.Confirmer and sink.Purger
// by type assertion, so the tracked sink is one exactly when the sink it wraps is (kafka and
// nats are both; the wrapper once hid them, and the agent's confirmations of event sinks were
// connection tests).
func TestTrackKeepsOptionalInterfaces(t *testing.T) {
	m := NewMetrics()
	full := m.Track(&fakeConfirmPurger{}, sink.Env{Namespace: "ns", Name: "bus"})
	if _, ok := full.(sink.Confirmer); !ok {
		t.Errorf("tracking a sink.Confirmer returned %T, not a sink.Confirmer", full)
	}
	if _, ok := full.(sink.Purger); !ok {
		t.Errorf("tracking a sink.Purger returned %T, not a sink.Purger", full)
	}
	if _, ok := full.(Reporter); !ok {
		t.Errorf("tracking returned %T, not a Reporter", full)
	}
	plain := m.Track(&fakeReporter{}, sink.Env{Namespace: "ns", Name: "bus"})
	_, confirms := plain.(sink.Confirmer)
	_, purges := plain.(sink.Purger)
	if confirms || purges {
		t.Errorf("tracking a plain sink returned %T, a Confirmer (%v) or Purger (%v) it does not implement", plain, confirms, purges)
	}
	_ = full.Close()
	_ = plain.Close()
	if n := testutil.CollectAndCount(m); n != 0 {
		t.Fatalf("%d series after every sink closed", n)
	}
}
