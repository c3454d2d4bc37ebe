// Package cli is the `kollect` command line: validate, render, collect and version, plus
// cobra's shell completion. Each subcommand lives in its own file and registers itself with
// register() in an init function, so adding one (query, hub …) touches one new file only.
//
// Exit codes: 0 success, 1 findings (validation errors, extraction failures), 2 usage errors
// and errors reaching a cluster.
package cli
