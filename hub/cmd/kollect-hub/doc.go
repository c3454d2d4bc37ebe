// Command kollect-hub runs the Kollect fleet hub: it registers agents, distributes bundles of
// Kollect configuration to them over Connect RPC and reports fleet health. Its flags are
// documented in docs/hub.md.
package main
