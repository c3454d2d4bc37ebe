// Package export is the data model every sink writes and every consumer can rely on: the
// canonical row and its identity key, the snapshot with its checksum, the diff between two
// snapshots, the envelope and the change event.
//
// A Row is one collected object for one target, identified by (cluster, inventory, target,
// uid). A Snapshot is the sorted set of rows of one inventory with a SHA-256 checksum over
// their canonical JSON. What a sink is and how it is called (the Sink interface, batches,
// error classes) is the sink package's; this package holds only data, so the collector, the
// profiles and the CLI use it without depending on any sink.
package export
