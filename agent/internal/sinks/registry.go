package sinks

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/gcs"
	"kollect.dev/agent/internal/sink/git"
	"kollect.dev/agent/internal/sink/gitlab"
	"kollect.dev/agent/internal/sink/kafka"
	"kollect.dev/agent/internal/sink/mongodb"
	"kollect.dev/agent/internal/sink/nats"
	"kollect.dev/agent/internal/sink/postgres"
	"kollect.dev/agent/internal/sink/s3"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// Factories returns the factory of every built-in sink type. With a registerer, event sinks'
// buffers are exported as metrics.
func Factories(reg ...prometheus.Registerer) sink.Factories {
	var m *bufferMetrics
	if len(reg) > 0 && reg[0] != nil {
		m = newBufferMetrics()
		reg[0].MustRegister(m)
	}
	return sink.Factories{
		"snapshot/git":    snapshot(git.New),
		"snapshot/gitlab": snapshot(gitlab.New),
		"snapshot/s3":     snapshot(s3.New),
		"snapshot/gcs":    snapshot(gcs.New),
		"database/postgres": database(func(ctx context.Context, s *kollectv1.KollectDatabaseSinkSpec, env sink.Env) (*postgres.Sink, error) {
			return postgres.New(ctx, s.Postgres, env)
		}),
		"database/mongodb": database(func(ctx context.Context, s *kollectv1.KollectDatabaseSinkSpec, env sink.Env) (*mongodb.Sink, error) {
			return mongodb.New(ctx, s.MongoDB, env)
		}),
		"event/kafka": event(kafka.New),
		"event/nats":  event(nats.New),
	}
}

// The adapters below convert a typed constructor into a SinkFactory, taking care that a nil
// *Sink with an error never becomes a non-nil interface.

func snapshot[S sink.Sink](f func(context.Context, *kollectv1.KollectSnapshotSinkSpec, sink.Env) (S, error)) sink.Factory {
	return func(ctx context.Context, obj client.Object, env sink.Env) (sink.Sink, error) {
		s, err := f(ctx, &obj.(*kollectv1.KollectSnapshotSink).Spec, env)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
}

func database[S sink.Sink](f func(context.Context, *kollectv1.KollectDatabaseSinkSpec, sink.Env) (S, error)) sink.Factory {
	return func(ctx context.Context, obj client.Object, env sink.Env) (sink.Sink, error) {
		s, err := f(ctx, &obj.(*kollectv1.KollectDatabaseSink).Spec, env)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
}

func event[S sink.Sink](f func(context.Context, *kollectv1.KollectEventSinkSpec, sink.Env) (S, error)) sink.Factory {
	return func(ctx context.Context, obj client.Object, env sink.Env) (sink.Sink, error) {
		s, err := f(ctx, &obj.(*kollectv1.KollectEventSink).Spec, env)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
}
