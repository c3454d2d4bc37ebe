// Package controller holds the agent's reconcilers. They translate Kollect objects into the
// in-memory pipeline (compiled profiles, collector targets, inventory configurations with
// their sinks) and write status back. Reconcilers run on every replica so a standby keeps its
// watches and snapshots warm; only the elected leader writes status, and only when it changed.
package controller
