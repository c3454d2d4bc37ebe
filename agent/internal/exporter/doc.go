// Package exporter delivers inventory snapshots to sinks: one worker per (inventory, sink),
// each with its own deadline, retry schedule (exponential backoff with full jitter) and circuit
// breaker, so a slow or dead sink never delays another. A worker exports only when the
// snapshot's checksum differs from the one its sink accepted last, and always sends the
// newest snapshot: intermediate ones a slow sink missed are skipped, not queued.
package exporter
