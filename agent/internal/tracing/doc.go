// Package tracing sets up OpenTelemetry tracing for kollect-agent from the standard OTEL_*
// environment variables, and names the spans and attributes of the export pipeline.
//
// Tracing is off unless OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is
// set or OTEL_TRACES_EXPORTER is otlp. Off, no provider is installed: the pipeline's tracers
// are OpenTelemetry's global no-op and no exporter runs. On, spans go over OTLP/HTTP
// (protobuf) with the SDK's own reading of the environment: the endpoint, headers, timeout,
// OTEL_TRACES_SAMPLER and OTEL_BSP_* batching, OTEL_SERVICE_NAME (default kollect-agent) and
// OTEL_RESOURCE_ATTRIBUTES.
//
// Attributes carry names and counts only, never row contents or credentials.
package tracing
