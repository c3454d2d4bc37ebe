// Package fleet assembles the hub's live view of the fleet from the store (clusters, their
// desired configuration and last reported status) and streams changes of it to WatchFleet
// subscribers.
package fleet
