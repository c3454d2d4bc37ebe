package backends

import (
	"maps"

	"github.com/prometheus/client_golang/prometheus"

	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/azureblob"
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
	"snapshot/git":       git.New,
	"snapshot/gitlab":    gitlab.New,
	"snapshot/s3":        s3.New,
	"snapshot/gcs":       gcs.New,
	"snapshot/azureblob": azureblob.New,
	"database/postgres":  postgres.New,
	"database/mongodb":   mongodb.New,
	"database/bigquery":  bigquery.New,
	"event/kafka":        kafka.New,
	"event/nats":         nats.New,
}

// Factories returns the table, a fresh copy for each caller. With a non-nil registerer, the
// buffers of the event sinks the table builds are exported as metrics (eventbuf.Metrics).
func Factories(reg prometheus.Registerer) sink.Factories {
	out := maps.Clone(table)
	if reg == nil {
		return out
	}
	m := eventbuf.NewMetrics()
	reg.MustRegister(m)
	for k, f := range out {
		out[k] = m.Tracking(f)
	}
	return out
}
