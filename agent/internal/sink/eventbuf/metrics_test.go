package eventbuf

import (
	"context"
	"strings"
	"testing"

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
