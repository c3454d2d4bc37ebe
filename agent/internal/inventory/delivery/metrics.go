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
	lastConfirm *prometheus.GaugeVec
	confirms    *prometheus.CounterVec
	interval    *prometheus.GaugeVec
	rows        *prometheus.GaugeVec
	conflict    *prometheus.GaugeVec
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
			Name: "kollect_export_last_success_timestamp_seconds", Help: "Unix time of the last successful export: when the sink's content last changed.",
		}, []string{"sink", "inventory"}),
		lastConfirm: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kollect_export_last_confirm_timestamp_seconds",
			Help: "Unix time the agent last confirmed the sink holds the current snapshot (an export confirms too): freshness.",
		}, []string{"sink", "inventory"}),
		confirms: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kollect_export_confirmations_total",
			Help: "Confirmations per sink by result: confirmed, failed, or not_held (the sink held another snapshot: exported again).",
		}, []string{"sink", "result"}),
		interval: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kollect_export_confirm_interval_seconds",
			Help: "The inventory's confirmInterval for the sink, 0 when confirmations are off: alerts on the confirmation age skip those.",
		}, []string{"sink", "inventory"}),
		rows: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kollect_exported_rows", Help: "Rows in the last snapshot a sink accepted.",
		}, []string{"sink", "inventory"}),
		conflict: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kollect_export_writer_conflict",
			Help: "1 while another agent writes the same cluster and inventory to the sink (two agents with one --cluster-name), else 0.",
		}, []string{"sink", "inventory"}),
	}
	reg.MustRegister(m.duration, m.errors, m.lastSuccess, m.lastConfirm, m.confirms, m.interval, m.rows, m.conflict)
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

// success records an accepted export; one of a complete snapshot confirms the sink too.
func (m *Metrics) success(name, inventory string, at time.Time, rows int, complete bool) {
	if m == nil {
		return
	}
	m.lastSuccess.WithLabelValues(name, inventory).Set(float64(at.Unix()))
	if complete {
		m.lastConfirm.WithLabelValues(name, inventory).Set(float64(at.Unix()))
	}
	m.rows.WithLabelValues(name, inventory).Set(float64(rows))
}

// Confirmation results.
const (
	confirmed = "confirmed"
	failed    = "failed"
	notHeld   = "not_held"
)

// confirmInterval publishes how often the sink is confirmed for the inventory.
func (m *Metrics) confirmInterval(name, inventory string, d time.Duration) {
	if m == nil || inventory == "" {
		return
	}
	m.interval.WithLabelValues(name, inventory).Set(d.Seconds())
	// The conflict gauge has a series from the start too, so an alert on it sees a 0.
	m.conflict.WithLabelValues(name, inventory)
}

// writerConflict records whether the sink's last answer reported another writer.
func (m *Metrics) writerConflict(name, inventory string, on bool) {
	if m == nil || inventory == "" {
		return
	}
	v := 0.0
	if on {
		v = 1
	}
	m.conflict.WithLabelValues(name, inventory).Set(v)
}

// initSink makes a sink's confirmation counters visible at zero before the first one, so an
// alert on their rate has a series from the start.
func (m *Metrics) initSink(name string) {
	if m == nil {
		return
	}
	for _, r := range []string{confirmed, failed, notHeld} {
		m.confirms.WithLabelValues(name, r)
	}
}

func (m *Metrics) confirmation(name, inventory, result string, at time.Time) {
	if m == nil {
		return
	}
	m.confirms.WithLabelValues(name, result).Inc()
	if result == confirmed {
		m.lastConfirm.WithLabelValues(name, inventory).Set(float64(at.Unix()))
	}
}
