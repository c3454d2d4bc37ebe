package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"

	"connectrpc.com/connect"
)

// opaqueInternal gives callers an internal (or unavailable) error's id instead of its text,
// and logs the text under that id. A store's error can name tables, columns, addresses and values, and some
// calls (Register, a failed authentication) come from callers the hub knows nothing of; an
// operator finds the cause in the hub's log by the id the caller quotes.
type opaqueInternal struct{ log *slog.Logger }

func (o opaqueInternal) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		resp, err := next(ctx, req)
		return resp, o.hide(req.Spec().Procedure, err)
	}
}

func (o opaqueInternal) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (o opaqueInternal) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return o.hide(conn.Spec().Procedure, next(ctx, conn))
	}
}

func (o opaqueInternal) hide(procedure string, err error) error {
	if err == nil {
		return nil
	}
	code := connect.CodeOf(err)
	switch code {
	case connect.CodeInternal, connect.CodeUnknown, connect.CodeUnavailable:
		// Unavailable too: the hub answers it when its store does not, with the store's text.
	default:
		return err
	}
	id := errorID()
	o.log.Error("call failed", "procedure", procedure, "code", code.String(), "id", id, "error", err)
	return connect.NewError(code, fmt.Errorf("error %s: the hub's log has the cause", id))
}

func errorID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
