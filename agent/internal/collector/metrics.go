package collector

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Metrics are the collector's Prometheus metrics. A nil *Metrics records nothing.
type Metrics struct {
	objects *prometheus.GaugeVec
	lag     *prometheus.HistogramVec
}

// NewMetrics registers the collector's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		objects: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kollect_watched_objects", Help: "Objects held (projected) per watched kind.",
		}, []string{"group", "version", "kind"}),
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kollect_watch_event_lag_seconds",
			Help:    "Time from an object's last write (managedFields) to the agent projecting it.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60},
		}, []string{"kind"}),
	}
	reg.MustRegister(m.objects, m.lag)
	return m
}

func (m *Metrics) setObjects(gvk schema.GroupVersionKind, n int) {
	if m == nil {
		return
	}
	m.objects.WithLabelValues(gvk.Group, gvk.Version, gvk.Kind).Set(float64(n))
}

func (m *Metrics) forgetGVK(gvk schema.GroupVersionKind) {
	if m == nil {
		return
	}
	m.objects.DeleteLabelValues(gvk.Group, gvk.Version, gvk.Kind)
}

// observeLag uses the newest managedFields time, the only write time an object carries. Its
// one-second resolution is fine for a lag measured against a debounce of seconds.
func (m *Metrics) observeLag(gvk schema.GroupVersionKind, u *unstructured.Unstructured) {
	var latest time.Time
	for _, mf := range u.GetManagedFields() {
		if mf.Time != nil && mf.Time.After(latest) {
			latest = mf.Time.Time
		}
	}
	if latest.IsZero() {
		return
	}
	m.lag.WithLabelValues(gvk.Kind).Observe(time.Since(latest).Seconds())
}
