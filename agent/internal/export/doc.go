// Package export is the export contract every sink implements and every consumer can rely on:
// the canonical row, the snapshot envelope, the change event, the diff between two snapshots,
// the checksum, and the Sink interface with its typed errors.
//
// A Row is one collected object for one target, identified by (cluster, inventory, target,
// uid). A Snapshot is the sorted set of rows of one inventory with a SHA-256 checksum over
// their canonical JSON. Sinks receive a Batch: the snapshot and the Diff against the
// snapshot the sink accepted last, so each family writes what it needs (documents, upserts
// and deletes, or change events).
//
// Sink backends live in sibling packages (agent/internal/sink/<type>) and import only this
// package, the API types for their configuration, and their client library.
package export
