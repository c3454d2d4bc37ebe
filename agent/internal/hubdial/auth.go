package hubdial

import (
	"context"
	"time"

	"connectrpc.com/connect"
)

// auth adds the bearer token to every call, unary and streaming, and bounds unary calls
// that carry no deadline of their own.
type auth struct {
	token        func() string
	unaryTimeout time.Duration
}

func (a *auth) header() string {
	if a.token == nil {
		return ""
	}
	if t := a.token(); t != "" {
		return "Bearer " + t
	}
	return ""
}

func (a *auth) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if _, ok := ctx.Deadline(); !ok && a.unaryTimeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, a.unaryTimeout)
			defer cancel()
		}
		if h := a.header(); h != "" {
			req.Header().Set("Authorization", h)
		}
		return next(ctx, req)
	}
}

func (a *auth) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		if h := a.header(); h != "" {
			conn.RequestHeader().Set("Authorization", h)
		}
		return conn
	}
}

func (a *auth) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
