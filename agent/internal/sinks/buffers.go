package sinks

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/eventbuf"
)

// bufferMetrics exposes the event buffers of every live event sink: how many events are owed
// to a broker that is down, and how often a full buffer fell back to a resync.
type bufferMetrics struct {
	mu      sync.Mutex
	sinks   map[*reportingSink]string // sink → "namespace/name"
	pending *prometheus.Desc
	over    *prometheus.Desc
	resyncs *prometheus.Desc
	sent    *prometheus.Desc
}

func newBufferMetrics() *bufferMetrics {
	l := []string{"sink"}
	return &bufferMetrics{sinks: map[*reportingSink]string{},
		pending: prometheus.NewDesc("kollect_event_buffer_pending", "Change events owed to an event sink's broker.", l, nil),
		over:    prometheus.NewDesc("kollect_event_buffer_overflows_total", "Times a full event buffer dropped its events for a resync.", l, nil),
		resyncs: prometheus.NewDesc("kollect_event_resyncs_total", "Full re-sends staged by an event sink (restarts, overflows, resync intervals).", l, nil),
		sent:    prometheus.NewDesc("kollect_events_delivered_total", "Change events acknowledged by an event sink's broker.", l, nil),
	}
}

func (m *bufferMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.pending
	ch <- m.over
	ch <- m.resyncs
	ch <- m.sent
}

func (m *bufferMetrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	defer m.mu.Unlock()
	// Several inventories may use one sink object: their buffers add up under its name.
	totals := map[string]eventbuf.Stats{}
	for s, name := range m.sinks {
		st, t := s.BufferStats(), totals[name]
		t.Pending += st.Pending
		t.Overflows += st.Overflows
		t.Resyncs += st.Resyncs
		t.Delivered += st.Delivered
		totals[name] = t
	}
	for name, t := range totals {
		ch <- prometheus.MustNewConstMetric(m.pending, prometheus.GaugeValue, float64(t.Pending), name)
		ch <- prometheus.MustNewConstMetric(m.over, prometheus.CounterValue, float64(t.Overflows), name)
		ch <- prometheus.MustNewConstMetric(m.resyncs, prometheus.CounterValue, float64(t.Resyncs), name)
		ch <- prometheus.MustNewConstMetric(m.sent, prometheus.CounterValue, float64(t.Delivered), name)
	}
}

// reportingSink is an event sink registered with the metrics until it is closed.
type reportingSink struct {
	sink.Sink
	eventbuf.Reporter
	m *bufferMetrics
}

func (s *reportingSink) Close() error {
	s.m.mu.Lock()
	delete(s.m.sinks, s)
	s.m.mu.Unlock()
	return s.Sink.Close()
}

// track wraps sinks that report buffer statistics.
func (m *bufferMetrics) track(s sink.Sink, env sink.Env) sink.Sink {
	r, ok := s.(eventbuf.Reporter)
	if !ok || m == nil {
		return s
	}
	rs := &reportingSink{Sink: s, Reporter: r, m: m}
	m.mu.Lock()
	m.sinks[rs] = env.Namespace + "/" + env.Name
	m.mu.Unlock()
	return rs
}
