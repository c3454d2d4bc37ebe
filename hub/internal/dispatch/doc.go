// Package dispatch distributes configuration to the agents holding a WatchConfig stream on
// this hub replica. After every change of desired configuration — at once for a local change
// (Kick), within a poll interval for a change made through another replica (the store's config
// epoch moves) — it reads the desired state of the whole fleet in two queries, builds each
// cluster's WatchConfigResponse in memory and wakes the streams whose configuration changed;
// a woken stream sends the current snapshot's configuration. Snapshots are built one after the
// other by one goroutine, so a stream never sends an older configuration after a newer one.
//
// It also relays bundle previews (Preview): each stream of an asked cluster gets a preview once,
// on Conn.Previews, including streams opened while the preview's requester still waits; the
// stream sends it in a message repeating its current configuration.
package dispatch
