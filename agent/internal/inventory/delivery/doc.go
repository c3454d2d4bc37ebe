// Package delivery delivers an inventory's snapshots to its sinks: one worker per (inventory,
// sink), each with its own deadline, retry schedule (exponential backoff with full jitter) and
// circuit breaker, so a slow or dead sink never delays another. A worker exports only when the
// snapshot's checksum differs from the one its sink accepted last, and always sends the newest
// snapshot: intermediate ones a slow sink missed are skipped, not queued.
//
// The inventory manager owns the workers (it starts, replaces and stops them as an inventory's
// sinks change); the sinks themselves come from package sink's factories.
package delivery
