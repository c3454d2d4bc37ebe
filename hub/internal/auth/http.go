package auth

import (
	"errors"
	"log/slog"
	"net/http"

	"kollect.dev/hub/internal/store"
)

// RequireToken serves h only to requests with an API token of at least role min; others get
// 401 (no or unknown token) or 403 (role too low), and the refusal is logged without the
// token. The hub's /metrics uses it: its series name every cluster and sink, which anonymous
// callers on the API port must not list.
func RequireToken(st store.Store, log *slog.Logger, min store.Role, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		refuse := func(code int, reason string) {
			if log != nil {
				log.WarnContext(r.Context(), "call refused", "path", r.URL.Path, "peer", r.RemoteAddr, "code", code, "reason", reason)
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
			http.Error(w, "checking API token: "+err.Error(), http.StatusServiceUnavailable)
			return
		case tok.Role < min:
			refuse(http.StatusForbidden, "token "+tok.Name+" is "+RoleName(tok.Role)+"; "+RoleName(min)+" is needed")
			return
		}
		h.ServeHTTP(w, r)
	})
}
