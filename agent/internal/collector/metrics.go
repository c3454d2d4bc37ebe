package collector

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Metrics are the collector's Prometheus metrics. A nil *Metrics records nothing.
type Metrics struct {
	objects     *prometheus.GaugeVec
	lag         *prometheus.HistogramVec
	evaluations *prometheus.CounterVec
	cost        *prometheus.CounterVec
	quarantines *prometheus.CounterVec
	lists       *prometheus.CounterVec
	restarts    *prometheus.CounterVec
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
		evaluations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kollect_profile_evaluations_total",
			Help: "Objects a profile's attributes were evaluated on (only objects one of its targets selects).",
		}, []string{"profile"}),
		cost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kollect_profile_cost_total",
			Help: "CEL cost units a profile spent: its attributes and the match expressions of its targets.",
		}, []string{"profile"}),
		quarantines: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kollect_profile_quarantines_total",
			Help: "Times a profile generation was quarantined for exceeding its cost budget.",
		}, []string{"profile"}),
		// Why: a list is what a watch costs the API server and the agent (every object decoded
		// and projected); tests and the benchmark count them to hold start-up and target
		// changes to one list per kind.
		lists: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kollect_watch_lists_total",
			Help: "Lists of every object of a kind the watches started: a LIST request (its pages count once) or a watch with initial events (the streaming watch-list); at a watch's start or restart, or a relist after its watch expired; one per namespace for a watch limited to namespaces.",
		}, []string{"group", "version", "kind"}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kollect_watch_starts_total",
			Help: "Watches of a kind started: the first target of the kind, or a change of what its targets need (coalesced: a burst of target changes starts one watch).",
		}, []string{"group", "version", "kind"}),
	}
	reg.MustRegister(m.objects, m.lag, m.evaluations, m.cost, m.quarantines, m.lists, m.restarts)
	return m
}

// profileCounters are one profile's counters, resolved once per watch rather than per object.
type profileCounters struct {
	evaluations, cost prometheus.Counter
}

// forProfile returns a profile's counters (nil for a nil Metrics); every series exists, at
// zero, from the moment a watch evaluates the profile.
func (m *Metrics) forProfile(name string) *profileCounters {
	if m == nil {
		return nil
	}
	m.quarantines.WithLabelValues(name)
	return &profileCounters{evaluations: m.evaluations.WithLabelValues(name), cost: m.cost.WithLabelValues(name)}
}

func (p *profileCounters) observe(cost uint64, evaluated bool) {
	if p == nil {
		return
	}
	if evaluated {
		p.evaluations.Inc()
	}
	if cost > 0 {
		p.cost.Add(float64(cost))
	}
}

func (m *Metrics) quarantined(name string) {
	if m == nil {
		return
	}
	m.quarantines.WithLabelValues(name).Inc()
}

func (m *Metrics) setObjects(gvk schema.GroupVersionKind, n int) {
	if m == nil {
		return
	}
	m.objects.WithLabelValues(gvk.Group, gvk.Version, gvk.Kind).Set(float64(n))
}

func (m *Metrics) listed(gvk schema.GroupVersionKind) {
	if m == nil {
		return
	}
	m.lists.WithLabelValues(gvk.Group, gvk.Version, gvk.Kind).Inc()
}

func (m *Metrics) started(gvk schema.GroupVersionKind) {
	if m == nil {
		return
	}
	m.restarts.WithLabelValues(gvk.Group, gvk.Version, gvk.Kind).Inc()
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
