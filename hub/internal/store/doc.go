// Package store defines the hub's persistent state — clusters, bootstrap and API tokens,
// bundles with immutable revisions, the per-cluster desired revision of each bundle, and the
// audit log — as the Store interface, independent of the database behind it (see sqlstore).
//
// The desired revision is kept per cluster and bundle, not per bundle, so that staged rollouts
// can move clusters to a revision wave by wave: CreateRevision without hold sets it for every
// selected cluster at once; a rollout (its rows are here too, written step by step with a
// compare-and-swap on the rollout's version) moves them in waves. Each bundle also has a
// stable revision, the one newly selected clusters get.
package store
