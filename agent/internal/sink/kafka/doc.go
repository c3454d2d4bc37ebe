// Package kafka is the Kafka event sink: one change event per upserted or deleted row,
// produced with franz-go's idempotent producer (acks=all, compressed batches) to one topic.
//
// The record key is the row's identity key (cluster/inventory/target/uid), so every event of
// a row lands in one partition in order and a compacted topic keeps the latest state of each
// row; a delete event is followed by a tombstone (null value) so compaction drops the row.
// Headers carry the schema version, cluster, inventory, event type and, for full re-sends,
// a resync mark. Pending events survive failed exports in a bounded eventbuf.Buffer.
//
// After an export that changes data or coverage, and at every confirmation (sink.Confirmer),
// the sink produces the inventory's state record, coverage per target included, under
// cluster/inventory/_state (see confirm.go).
//
// In snapshot mode the envelope is produced as numbered chunks under the topic's message
// size limit instead. The delivery semantics are documented in docs/sinks/events.md.
package kafka
