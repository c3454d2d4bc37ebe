// Package mongodb is the MongoDB database sink: one document per exported row in a collection
// with a unique index on the identity (cluster, inventory, target, uid), and one state document
// per (cluster, inventory) in <collection>_state holding the last accepted checksum, and one
// coverage document per (cluster, inventory, target) in <collection>_coverage (coverage.go).
//
// Documents use the identity key "cluster/inventory/target/uid" as _id, so every write and
// delete addresses one document by primary key: that is what MongoDB-wire servers without a
// general query planner (FerretDB) can do fast, and it makes upserts idempotent.
//
// Each export takes one of three paths, like the Postgres sink: nothing when the state holds
// the envelope's checksum; the diff (unordered bulk upserts and deletes) when the state holds
// the batch's PreviousChecksum; otherwise a full reconcile of that (cluster, inventory),
// which reads the stored _id and digest of its documents and writes only the differences.
//
// MongoDB-wire servers without multi-document transactions (FerretDB v1, standalone mongod)
// cannot apply an export atomically, so the writes are ordered to converge instead:
//
//  1. the state document is marked pending (the target checksum), before any row is written;
//  2. rows are upserted and deleted (unordered bulk writes, each idempotent);
//  3. the coverage documents that differ are replaced, those of targets no longer covered
//     deleted;
//  4. the state document gets the new checksum and loses the pending mark, last.
//
// A batch whose checksum the state holds but whose coverage differs writes step 3 and the
// state's writer only: no row, no pending mark (coverage writes are idempotent and compared
// again by the next export).
//
// A crash between 1 and 4 leaves the mark, and the next export, whatever its diff, does a
// full reconcile: a diff computed against the last committed snapshot cannot repair rows a
// half-applied later export already touched. Readers may see a half-applied export for the
// duration of one; the state document tells which checksum is complete.
package mongodb
