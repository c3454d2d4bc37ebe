// Package bigquery is the BigQuery database sink: a table of rows with the same columns as the
// Postgres sink (attributes as JSON) and a state table with the last accepted checksum per
// (cluster, inventory), in a dataset it creates when missing.
//
// An export that changes something stages its rows (the diff, or every row on a full
// reconcile) in a fresh staging table that expires after an hour, then runs one multi-statement
// transaction: INSERT … SELECT of the new version of changed rows and of new rows, one DELETE
// of old versions, deleted keys and, on a full reconcile, this cluster's and inventory's rows
// the snapshot lacks, and the new state. Readers therefore never see a half-applied export,
// and a failure anywhere leaves the previous state, which the retry starts from. An unchanged
// inventory costs one query of the state table and no write; a periodic resync of one reads
// its rows back too (drift.go) and reconciles only when they drifted.
//
// A fleet shares the tables, and BigQuery runs one transaction that changes a table at a time,
// cancelling the others (conflict.go): staging runs in parallel, the transactions take turns.
// A sink runs its own mutating jobs one at a time, and one that lost to another agent's runs
// again after a jittered wait within the call's deadline; such conflicts are transient.
//
// The transaction avoids MERGE, UPDATE with joins and correlated subqueries in DML, which the
// BigQuery emulator the tests run against cannot execute (see script in write.go).
//
// A confirmation (sink.Confirmer) is one UPDATE of the state row's confirmed_at, bound to its
// checksum (see confirm.go).
//
// The decision between nothing, the diff and a full reconcile is the Postgres sink's: the diff
// only applies on top of the checksum it was computed from.
package bigquery
