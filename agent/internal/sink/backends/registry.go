package backends

import (
	"maps"

	"github.com/prometheus/client_golang/prometheus"

	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/bigquery"
	"kollect.dev/agent/internal/sink/eventbuf"
	"kollect.dev/agent/internal/sink/gcs"
	"kollect.dev/agent/internal/sink/git"
	"kollect.dev/agent/internal/sink/gitlab"
	"kollect.dev/agent/internal/sink/kafka"
	"kollect.dev/agent/internal/sink/mongodb"
	"kollect.dev/agent/internal/sink/nats"
	"kollect.dev/agent/internal/sink/postgres"
	"kollect.dev/agent/internal/sink/s3"
)

// table is every backend by sink.Key. Adding a backend is one line here and a value in its
// CRD's spec.type enum; TestTableMatchesCRDEnums fails until both are there.
var table = sink.Factories{
	"snapshot/git":      git.New,
	"snapshot/gitlab":   gitlab.New,
	"snapshot/s3":       s3.New,
	"snapshot/gcs":      gcs.New,
	"database/postgres": postgres.New,
	"database/mongodb":  mongodb.New,
	"database/bigquery": bigquery.New,
	"event/kafka":       kafka.New,
	"event/nats":        nats.New,
}

// Factories returns the factory of every built-in sink type. With a registerer, event sinks'
// buffers are exported as metrics.
func Factories(reg ...prometheus.Registerer) sink.Factories {
	var m *eventbuf.Metrics
	if len(reg) > 0 && reg[0] != nil {
		m = eventbuf.NewMetrics()
		reg[0].MustRegister(m)
	}
	return maps.Clone(table)
}
