// Package nats is the NATS JetStream event sink: one change event per upserted or deleted
// row, published to a subject rendered from a template (default
// kollect.{cluster}.{inventory}.{kind}) with a Nats-Msg-Id derived from the event, so a retried
// publish inside the stream's duplicate window is stored once.
//
// Publishes are asynchronous with a bounded number in flight, and an export succeeds only when
// every publish was acknowledged by the stream. Optionally a key-value bucket keeps the latest
// row per key (deleted on removal) for consumers that want state rather than history; after an
// agent restart it also tells the sink which rows consumers hold, so rows deleted meanwhile get
// their delete events. Pending events survive failed exports in a bounded eventbuf.Buffer.
// After an export that changes data or coverage, and at every confirmation (sink.Confirmer),
// the sink publishes the inventory's state, coverage per target included, on the subject with
// {kind} = _state (see confirm.go).
// The delivery semantics are documented in docs/sinks/events.md.
package nats
