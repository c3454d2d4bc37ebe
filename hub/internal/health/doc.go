// Package health derives fleet health from what agents report: each cluster's liveness
// (online, stale, offline from heartbeat age), config and version skew, and the
// export-freshness matrix (cluster × sink), both for FleetService and as Prometheus metrics.
package health
