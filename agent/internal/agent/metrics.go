package agent

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// metricsRegistry is controller-runtime's registry (served on the metrics address), or a
// private one when several agents share a process and would register the same names twice.
// Options.Registry, when set, is used instead (tests read the agent's metrics from it).
func metricsRegistry(o Options) prometheus.Registerer {
	if o.Registry != nil {
		return o.Registry
	}
	if o.SkipNameValidation {
		return prometheus.NewRegistry()
	}
	return ctrlmetrics.Registry
}
