// Package fleetsim simulates Kollect agents for dashboard tests and screenshots: each one
// registers with a real hub using a bootstrap token, follows WatchConfig, and heartbeats with
// ReportStatus — inventories with item counts, sinks with export times and errors, and every
// bundle revision it receives reported as applied — so the hub's fleet view, freshness matrix
// and rollouts behave as with real agents, without a Kubernetes cluster behind each one.
package fleetsim
