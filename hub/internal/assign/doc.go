// Package assign turns a cluster's desired revisions (store.Desired rows) into the
// WatchConfigResponse the agent receives, and computes its config digest. Revisions are
// immutable, so their content is cached forever once read.
package assign
