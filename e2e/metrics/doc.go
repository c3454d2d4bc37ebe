// Package metrics checks that every metric docs/operations.md documents is served by the
// shipped kollect-agent: the binary `make build` produces runs against a real control plane,
// exports to a git repository (file://), a real nats-server and an unreachable PostgreSQL, and
// its /metrics endpoint is scraped over HTTP. A documented metric without a series is a failure.
package metrics
