package agent

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// metricsRegistry is controller-runtime's registry (served on the metrics address), or a
// private one when several agents share a process and would register the same names twice.
func metricsRegistry(private bool) prometheus.Registerer {
	if private {
		return prometheus.NewRegistry()
	}
	return ctrlmetrics.Registry
}
