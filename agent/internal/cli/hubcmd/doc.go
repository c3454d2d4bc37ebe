// Package hubcmd is `kollect hub`: the fleet operator's commands, each a call of the hub's
// FleetService through package hubdial (pinned CA, bearer token) with the login that
// `kollect hub login` saves: clusters and whoami, bundles (apply, diff, history), staged
// rollouts (start, status with a live display, pause, resume, abort, rollback, history),
// bootstrap and API tokens, and agent revocation.
package hubcmd
