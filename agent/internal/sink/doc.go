// Package sink is the contract between the agent and its sink backends: the Sink interface
// and the Batch it receives (the snapshot envelope and the diff against what the sink
// accepted last), previews, the transient and terminal error classes that drive retries, the
// Env every backend is built with (cluster, secret access, cache directory, logger) and the
// query types of the database sinks.
//
// The backends live under this directory, one package per type (sink/<type>), beside the
// helpers they share (snapshot, eventbuf, sinktls). The rows themselves are package export's.
package sink
