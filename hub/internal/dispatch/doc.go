// Package dispatch keeps track of the agents holding a WatchConfig stream on this hub replica
// and wakes those whose desired configuration changed: at once after a local change (Kick),
// and within a poll interval after a change made through another replica (the store's config
// epoch moves). A woken stream reads its own configuration fresh from the store, so a stream
// can never send an older configuration after a newer one.
package dispatch
