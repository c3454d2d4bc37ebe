// Package gitrepo is the git engine the git and gitlab snapshot sinks share: it renders each
// export with package snapshot and commits the documents that changed to a branch of a git
// repository, with go-git. It is a helper of the backends, not a backend: it has no entry in
// the sink table, and the backends import it as they import package snapshot.
//
// The repository is mirrored bare and shallow into the sink's cache directory (repo.go: the
// tips an export builds on, never their history) and commits are built directly from tree
// objects, never through a worktree, so a 100k-file inventory costs the files that changed,
// not a status walk of the whole tree. A commit is made only when the resulting tree differs
// from the branch tip, and its new objects are pushed as one pack (pack.go). Pushes are never
// forced: when another agent (another cluster sharing the repository) pushed first, the sink
// fetches the new tip, re-applies its documents on top of it and pushes again, paced for a
// fleet (rounds.go), so concurrent agents keep a linear history and never lose each other's
// commits. Each inventory's writer file names the agent that last changed it, and another
// agent with the same cluster name is refused (writer.go, contender.go). Publish commits to
// another branch than the configured one (the gitlab sink's merge-request branches).
//
// Credentials come from the sink's secretRef: token (HTTPS, as the basic-auth password, with
// username when set), username and password, or ssh-privatekey with known_hosts; tls.caSecretRef
// adds a certificate authority for HTTPS remotes.
package gitrepo
