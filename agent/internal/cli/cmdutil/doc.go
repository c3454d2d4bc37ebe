// Package cmdutil holds what every `kollect` command shares, whoever it is for: the streams a
// command reads and writes (Env), the exit codes and the errors that carry them. The offline
// commands (package cli) and the hub commands (package hubcmd) both build on it; only the root
// command in package cli turns an error into an exit code.
//
// Exit codes: 0 success, 1 findings (validation errors, extraction failures), 2 usage errors
// and errors reaching a cluster or a hub.
package cmdutil
