// Package webhook holds the agent's validating admission webhooks for the Kollect kinds and
// the checks behind them, which `kollect validate` runs offline too: CEL and JSONPath compile
// errors with their position, target selections, scope rules, sink references of the wrong
// family and secret references that try to leave the sink's namespace.
//
// The webhooks are an early answer, not the enforcement: the reconcilers apply the same scope
// rules again (a scope may change after admission, or the webhook may have been down), so
// the configuration fails closed for Kollect kinds only and never covers status writes.
package webhook
