package auth

import "context"

// front marks a context whose call AgentAuth.Authenticate or FleetAuth.Authorize admitted from
// its headers. The hub runs them in an HTTP handler in front of each service, before Connect
// reads the request body (it reads a unary body before any interceptor runs): an
// unauthenticated caller then costs the hub no body read, gunzip or decode. The interceptors
// skip what the front decided and keep what needs the message (a dry run's role, Register's
// bootstrap token). Only this package can set the mark, and only on success.
func front(ctx context.Context) context.Context { return context.WithValue(ctx, frontKey, true) }

// fronted says whether Authenticate or Authorize admitted the call already.
func fronted(ctx context.Context) bool {
	v, _ := ctx.Value(frontKey).(bool)
	return v
}
