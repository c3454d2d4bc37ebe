// Package inventory turns targets' rows into canonical snapshots and hands them to its delivery
// workers (package inventory/delivery), one per sink. Each inventory runs a trailing debounce
// bounded by maxDelay: a burst of changes becomes one snapshot, and under constant churn a
// snapshot is still built at least every maxDelay. A snapshot whose checksum equals the
// previous one is not offered to any sink.
//
// A target whose watch is incomplete (still syncing, or forbidden by RBAC) keeps the rows it
// had in the previous snapshot; with no previous snapshot the inventory holds its export rather
// than publish a snapshot that would read as "all rows deleted".
package inventory
