package tracing

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// ServiceName is the service.name of the agent's spans unless OTEL_SERVICE_NAME says otherwise.
const ServiceName = "kollect-agent"

// Attribute keys of the pipeline's spans.
const (
	Inventory   = attribute.Key("kollect.inventory")
	Rows        = attribute.Key("kollect.rows")
	RowsChanged = attribute.Key("kollect.rows.changed")
	Targets     = attribute.Key("kollect.targets")
	Sink        = attribute.Key("kollect.sink")
	SinkType    = attribute.Key("kollect.sink.type")
	Kind        = attribute.Key("kollect.kind")
)

// Span and event names of the pipeline.
const (
	SpanBuild   = "inventory.build"
	SpanExport  = "delivery.export"
	EventChange = "watch.change"
)

// Tracer is the tracer of a pipeline component: the global provider's, a no-op until Setup
// installs one. Tracers are looked up at use, so a component made before Setup still traces.
func Tracer(component string) trace.Tracer {
	return otel.Tracer("kollect.dev/agent/" + component)
}

// Enabled reports whether the environment asks for traces to be exported.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	switch exp := strings.TrimSpace(strings.ToLower(getenv("OTEL_TRACES_EXPORTER"))); exp {
	case "otlp":
		return true
	case "", "none":
		if exp == "none" {
			return false
		}
	default:
		return false // only otlp is built in; an unknown exporter is refused by Setup
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup installs the global tracer provider when the environment enables tracing, and returns
// the function that flushes and stops it (a no-op when tracing is off). It fails for an
// exporter the agent does not have, rather than silently tracing nowhere.
func Setup(ctx context.Context, log logr.Logger) (shutdown func(context.Context) error, err error) {
	noop := func(context.Context) error { return nil }
	if exp := strings.TrimSpace(strings.ToLower(os.Getenv("OTEL_TRACES_EXPORTER"))); exp != "" && exp != "otlp" && exp != "none" {
		return noop, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: kollect-agent exports traces only with otlp (or none)", exp)
	}
	if p := strings.ToLower(os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")); p == "" {
		p = strings.ToLower(os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
		if p != "" && p != "http/protobuf" {
			return noop, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%s: kollect-agent exports traces over http/protobuf only", p)
		}
	} else if p != "http/protobuf" {
		return noop, fmt.Errorf("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=%s: kollect-agent exports traces over http/protobuf only", p)
	}
	if !Enabled(os.Getenv) {
		return noop, nil
	}
	// The exporter reads OTEL_EXPORTER_OTLP_* itself (endpoint, headers, timeout, TLS).
	exporter, err := otlptracehttp.New(ctx)
	if err != nil {
		return noop, fmt.Errorf("creating the OTLP/HTTP trace exporter: %w", err)
	}
	// Later detectors win: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override the default name.
	res, err := resource.New(ctx, resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", ServiceName)), resource.WithFromEnv())
	if err != nil {
		return noop, fmt.Errorf("building the trace resource from OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	// No sampler option: the SDK applies OTEL_TRACES_SAMPLER(_ARG), and WithBatcher OTEL_BSP_*.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Error(err, "exporting traces")
	}))
	log.Info("tracing enabled: exporting spans over OTLP/HTTP")
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			return fmt.Errorf("flushing traces: %w", err)
		}
		return nil
	}, nil
}
