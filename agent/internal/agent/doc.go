// Package agent assembles a Kollect agent: a controller-runtime manager with the collector,
// the inventory manager and the reconcilers. The kollect-agent binary, the demo and the
// end-to-end tests all build agents through New, so they run the same wiring.
package agent
