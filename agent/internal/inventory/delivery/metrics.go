package delivery

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"kollect.dev/agent/internal/sink"
)

// Metrics are the delivery workers' Prometheus metrics. A nil *Metrics records nothing.
type Metrics struct {
	duration    *prometheus.HistogramVec
	errors      *prometheus.CounterVec
	lastSuccess *prometheus.GaugeVec
	rows        *prometheus.GaugeVec
}

// NewMetrics registers the delivery workers' metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "kollect_export_duration_seconds", Help: "Duration of export calls per sink.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2.5, 12),
		}, []string{"sink"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kollect_export_errors_total", Help: "Failed export calls per sink and error class.",
		}, []string{"sink", "class"}),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kollect_export_last_success_timestamp_seconds", Help: "Unix time of the last successful export (freshness).",
		}, []string{"sink", "inventory"}),
		rows: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kollect_exported_rows", Help: "Rows in the last snapshot a sink accepted.",
		}, []string{"sink", "inventory"}),
	}
	reg.MustRegister(m.duration, m.errors, m.lastSuccess, m.rows)
	return m
}

func (m *Metrics) observe(name, _ string, d time.Duration, err error) {
	if m == nil {
		return
	}
	m.duration.WithLabelValues(name).Observe(d.Seconds())
	if err != nil {
		m.errors.WithLabelValues(name, string(sink.ClassOf(err))).Inc()
	}
}

func (m *Metrics) success(name, inventory string, at time.Time, rows int) {
	if m == nil {
		return
	}
	m.lastSuccess.WithLabelValues(name, inventory).Set(float64(at.Unix()))
	m.rows.WithLabelValues(name, inventory).Set(float64(rows))
}
