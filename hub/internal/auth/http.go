package auth

import (
	"errors"
	"net/http"

	"connectrpc.com/connect"

	"kollect.dev/hub/internal/store"
)

// RequireToken serves h only to requests with an API token of at least role min; others get
// 401 (no or unknown token) or 403 (role too low). A refusal is logged without the token,
// audited and counted against the caller's address, and a failed one from an address whose
// failures used up its budget gets 429 with Retry-After; a valid token is always served. The hub's /metrics
// uses it: its series name every cluster and sink, which anonymous callers must not list.
func RequireToken(st store.Store, g *Guard, min store.Role, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		refuse := func(code int, reason string) {
			cc := connect.CodeUnauthenticated
			if code == http.StatusForbidden {
				cc = connect.CodePermissionDenied
			}
			err := g.Reject(r.Context(), r.URL.Path, r.RemoteAddr, r.Header, connect.NewError(cc, errors.New(reason)))
			if connect.CodeOf(err) == connect.CodeResourceExhausted {
				var ce *connect.Error
				if errors.As(err, &ce) {
					w.Header().Set("Retry-After", ce.Meta().Get("Retry-After"))
				}
				http.Error(w, err.Error(), http.StatusTooManyRequests)
				return
			}
			if code == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="kollect-hub"`)
			}
			http.Error(w, reason, code)
		}
		secret, ok := bearer(r.Header)
		if !ok {
			refuse(http.StatusUnauthorized, "an API token is required (Authorization: Bearer)")
			return
		}
		tok, err := st.APITokenByHash(r.Context(), Hash(secret))
		switch {
		case errors.Is(err, store.ErrNotFound):
			refuse(http.StatusUnauthorized, "unknown or revoked API token")
			return
		case err != nil:
			// The store's error is for the log: this caller may be anyone.
			g.log.WarnContext(r.Context(), "checking an API token for "+r.URL.Path, "error", err)
			http.Error(w, "the hub cannot check API tokens now", http.StatusServiceUnavailable)
			return
		case TokenExpired(tok, g.Now()) != nil:
			refuse(http.StatusUnauthorized, TokenExpired(tok, g.Now()).Error())
			return
		case tok.Role < min:
			refuse(http.StatusForbidden, "token "+tok.Name+" is "+RoleName(tok.Role)+"; "+RoleName(min)+" is needed")
			return
		}
		h.ServeHTTP(w, r)
	})
}
