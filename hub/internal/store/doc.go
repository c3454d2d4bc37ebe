// Package store defines the hub's persistent state — clusters, bootstrap and API tokens,
// bundles with immutable revisions, the per-cluster desired revision of each bundle, and the
// audit log — as the Store interface, independent of the database behind it (see sqlstore).
//
// The desired revision is kept per cluster and bundle, not per bundle, so that staged rollouts
// can move clusters to a revision wave by wave; today CreateRevision sets it for every selected
// cluster at once.
package store
