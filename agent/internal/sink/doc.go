// Package sink is the contract between the agent and its sink backends: the Sink interface
// and the Batch it receives (the snapshot envelope and the diff against what the sink
// accepted last), previews, the transient and terminal error classes that drive retries, the
// Env every backend is built with (cluster, secret access, cache directory, logger), and the
// query types and the Purger (what a sink holds of a cluster, and its removal) of the
// database sinks.
//
// Factory is the one constructor shape of every backend (each backend's New is one), and
// Factories a table of them keyed by Key ("family/type").
//
// The sink wing is this directory:
//
//	sink                 this contract
//	sink/<type>          one leaf package per backend (git, gitlab, s3, gcs, postgres, mongodb,
//	                     bigquery, kafka, nats): it imports this contract, the export data
//	                     model, the API types, the shared helpers below and its client library,
//	                     never another backend, the controller or the inventory
//	sink/snapshot        rendering of documents for the snapshot backends
//	sink/gitrepo         the git engine of the git and gitlab backends
//	sink/eventbuf        the bounded event buffer of the event backends, and its metrics
//	sink/sinktls         client TLS from a sink's Secrets
//	sink/backends        the one table of every backend, tested against the CRDs' type enums
//	sink/sinktest        test helpers: a recording sink, a batch driver, rows, secrets
//
// The rows themselves are package export's; the workers that call sinks are package
// inventory/delivery's.
package sink
