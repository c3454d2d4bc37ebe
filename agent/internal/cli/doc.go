// Package cli is the `kollect` command line. Its root command (root.go) lists every subcommand
// explicitly, in the order help shows them:
//
//   - for anyone with manifests, no cluster needed: validate and render, which run the agent's
//     own compiler and selection offline (package offline);
//   - for anyone with a cluster or a sink: collect (rows from clusters in one shot) and query
//     (rows back from a database sink);
//   - for fleet operators: hub (package hubcmd: clusters, bundles, rollouts, tokens, agents);
//   - version.
//
// What every command shares (the streams, exit codes and exit errors) is in package cmdutil;
// only the root command turns an error into an exit code: 0 success, 1 findings (validation
// errors, extraction failures), 2 usage errors and errors reaching a cluster or a hub.
package cli
