// Package server is the hub itself: it wires the store, TLS identity, bundle validator,
// configuration dispatcher and fleet view behind a chi router that serves the AgentService and
// FleetService Connect handlers (Connect, gRPC and gRPC-Web on one HTTP/2 TLS port), Prometheus
// metrics and the hub CA certificate.
package server
