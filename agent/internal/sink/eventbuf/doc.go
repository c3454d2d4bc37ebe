// Package eventbuf holds the delivery state event sinks (kafka, nats) share: which change
// events of an inventory are still owed to the broker, bounded, across failed exports.
//
// The delivery worker retries a failed batch and may meanwhile produce newer batches whose diff
// is relative either to the last snapshot the sink accepted or to the last one it was given. The
// Buffer turns every batch into per-key pending events (the latest event per key wins, so
// per-key order holds), hands them to the sink's send function, drops what the broker
// acknowledged and keeps the rest for the next call. When more than the configured number of
// events is owed after a failure, it drops them and schedules a marked resync (every row of
// the newest snapshot as an upsert, plus deletes for keys it touched that are gone): memory
// stays bounded and consumers still converge. ErrBufferFull tells the agent to report it.
//
// A batch without a baseline (Diff.Full: after an agent restart) is never re-sent in full:
// the sink reads back from its broker what consumers hold (Held), and Reconcile turns the batch
// into the exact change from it, deletes included, so a restart with unchanged data sends
// nothing.
//
// Snapshot mode does not buffer (the newest envelope supersedes older ones); Chunks splits an
// envelope into numbered JSON documents under a broker's message size limit. Metrics exports
// the buffers of live sinks to Prometheus.
package eventbuf
