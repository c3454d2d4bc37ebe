package inventory

import (
	"github.com/prometheus/client_golang/prometheus"

	"kollect.dev/agent/internal/export"
)

// Metrics are the inventories' coverage metrics. A nil *Metrics records nothing.
type Metrics struct {
	coverage *prometheus.GaugeVec
	errors   *prometheus.GaugeVec
}

// NewMetrics registers the inventories' metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		coverage: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kollect_inventory_target_coverage",
			Help: "1 for each target's coverage state in the inventory's last snapshot: complete, syncing, forbidden, kindNotServed, deniedByScope, failed.",
		}, []string{"inventory", "target", "state"}),
		errors: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kollect_inventory_target_extraction_errors",
			Help: "Objects a target selects whose extraction failed in the inventory's last snapshot (they have no row).",
		}, []string{"inventory", "target"}),
	}
	reg.MustRegister(m.coverage, m.errors)
	return m
}

// setCoverage replaces an inventory's series with its new coverage.
func (m *Metrics) setCoverage(inventory string, c []export.Coverage) {
	if m == nil {
		return
	}
	m.forget(inventory)
	for i := range c {
		m.coverage.WithLabelValues(inventory, c[i].Target, string(c[i].State)).Set(1)
		m.errors.WithLabelValues(inventory, c[i].Target).Set(float64(c[i].ExtractionErrors))
	}
}

// forget drops an inventory's series (it was removed).
func (m *Metrics) forget(inventory string) {
	if m == nil {
		return
	}
	m.coverage.DeletePartialMatch(prometheus.Labels{"inventory": inventory})
	m.errors.DeletePartialMatch(prometheus.Labels{"inventory": inventory})
}
