// Package mongodb is the MongoDB database sink: one document per version of an exported row in a
// collection, one state document per (cluster, inventory) in <collection>_state holding the
// last accepted checksum and the committed generation, and one coverage document per
// (cluster, inventory, target) in <collection>_coverage (coverage.go).
//
// A row document is one version of a row: _id "cluster/inventory/target/uid@generation", the
// generation that wrote it in gen and, once a later export replaced or deleted the row, that
// export's generation in gen_end (generation.go). The unique index on (cluster, inventory,
// target, uid, gen) makes two versions of a row from one export impossible.
//
// Each export takes one of three paths, like the Postgres sink: nothing when the state holds
// the envelope's checksum; the diff when the state holds the batch's PreviousChecksum;
// otherwise a full reconcile of that (cluster, inventory), which reads the stored _id and
// digest of its current documents and writes only the differences.
//
// MongoDB-wire servers without multi-document transactions (FerretDB v1, standalone mongod)
// cannot apply an export atomically, and replica sets would need a transaction per export
// that FerretDB cannot run; every deployment gets one design instead, a generation switch,
// which readers see all or nothing of:
//
//  1. the state document is marked pending (the target checksum), before any row is written;
//  2. the new version of each added and changed row is inserted (gen: the next generation),
//     and the current versions of changed and deleted rows are marked ended (gen_end), with
//     unordered bulk writes: the committed generation shows none of it;
//  3. the coverage documents that differ are replaced, those of targets no longer covered
//     deleted (the coverage is not part of the generation);
//  4. the state document gets the new generation and checksum and loses the pending mark in
//     one single-document update: the switch;
//  5. the ended versions are deleted.
//
// A reader that reads the state's generation and then only the documents it shows (Query,
// CompleteFilter) sees whole exports. A crash between 1 and 4 leaves the mark, and the next
// export first rolls back what the interrupted one wrote (its versions go, the ones it ended
// are current again), after which the rows are exactly the committed checksum's and a diff
// computed from it applies. A crash between 4 and 5 leaves a dirty mark, and the next export,
// even an unchanged one, deletes the ended versions first.
//
// A batch whose checksum the state holds but whose coverage differs writes step 3 and the
// state's writer only: no row, no pending mark (coverage writes are idempotent and compared
// again by the next export).
package mongodb
