// Package git is the git snapshot sink: every export's documents that changed are committed to
// a branch of a git repository, over HTTPS (token or username and password), SSH or a file
// path. The work (mirror, commits built from tree objects, pushes that are never forced) is
// package gitrepo's, shared with the gitlab sink; this package is the backend's entry in the
// sink table.
package git
