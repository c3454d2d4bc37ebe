package eventbuf

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"kollect.dev/agent/internal/sink"
)

// Metrics exposes the buffers of every live event sink as Prometheus metrics: how many events
// are owed to a broker that is down, and how often a full buffer fell back to a resync. The
// sink table registers one and tracks the sinks it builds; a nil *Metrics tracks nothing.
type Metrics struct {
	mu      sync.Mutex
	sinks   map[*reportingSink]string // sink → "namespace/name"
	pending *prometheus.Desc
	over    *prometheus.Desc
	resyncs *prometheus.Desc
	sent    *prometheus.Desc
}

// NewMetrics returns a collector with no sinks; register it, then Track each sink built.
func NewMetrics() *Metrics {
	l := []string{"sink"}
	return &Metrics{sinks: map[*reportingSink]string{},
		pending: prometheus.NewDesc("kollect_event_buffer_pending", "Change events owed to an event sink's broker.", l, nil),
		over:    prometheus.NewDesc("kollect_event_buffer_overflows_total", "Times a full event buffer dropped its events for a resync.", l, nil),
		resyncs: prometheus.NewDesc("kollect_event_resyncs_total", "Full re-sends staged by an event sink (buffer overflows, batches whose relation to what consumers hold is unknown).", l, nil),
		sent:    prometheus.NewDesc("kollect_events_delivered_total", "Change events acknowledged by an event sink's broker.", l, nil),
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.pending
	ch <- m.over
	ch <- m.resyncs
	ch <- m.sent
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	defer m.mu.Unlock()
	// Several inventories may use one sink object: their buffers add up under its name.
	totals := map[string]Stats{}
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
	Reporter
	m *Metrics
}

// Close forgets the sink, then closes it.
func (s *reportingSink) Close() error {
	s.m.mu.Lock()
	delete(s.m.sinks, s)
	s.m.mu.Unlock()
	return s.Sink.Close()
}

// The wrapper keeps the optional interfaces of the sink it wraps. The delivery worker finds
// sink.Confirmer and sink.Purger by type assertion on the sink it was given: a wrapper that
// hid them turned every confirmation of an event sink into a connection test (no state record
// written, so a quiet holder looked gone to a second writer after the conflict window) and
// skipped a deletionPolicy Delete's purge of the state record.
type (
	confirmingSink struct {
		*reportingSink
		sink.Confirmer
	}
	purgingSink struct {
		*reportingSink
		sink.Purger
	}
	confirmingPurgingSink struct {
		*reportingSink
		sink.Confirmer
		sink.Purger
	}
)

// Track wraps s, when it reports buffer statistics, so that its buffer is collected under
// "namespace/name" of env until the sink is closed; other sinks are returned as they are. The
// wrapper is a sink.Confirmer and a sink.Purger exactly when s is.
func (m *Metrics) Track(s sink.Sink, env sink.Env) sink.Sink {
	r, ok := s.(Reporter)
	if !ok || m == nil {
		return s
	}
	rs := &reportingSink{Sink: s, Reporter: r, m: m}
	m.mu.Lock()
	m.sinks[rs] = env.Namespace + "/" + env.Name
	m.mu.Unlock()
	c, confirms := s.(sink.Confirmer)
	p, purges := s.(sink.Purger)
	switch {
	case confirms && purges:
		return &confirmingPurgingSink{rs, c, p}
	case confirms:
		return &confirmingSink{rs, c}
	case purges:
		return &purgingSink{rs, p}
	}
	return rs
}

// Tracking wraps a sink factory so that every sink it builds is tracked.
func (m *Metrics) Tracking(f sink.Factory) sink.Factory {
	return func(ctx context.Context, obj sink.Object, env sink.Env) (sink.Sink, error) {
		s, err := f(ctx, obj, env)
		if err != nil {
			return nil, err
		}
		return m.Track(s, env), nil
	}
}
