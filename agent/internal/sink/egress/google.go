package egress

import (
	"context"
	"fmt"
	"net/http"

	"google.golang.org/api/option"
	htransport "google.golang.org/api/transport/http"
)

// GoogleOptions returns client options for a Google Cloud client (storage, BigQuery) whose
// every connection goes through the guard: the authenticated transport the client would
// build from opts (credentials, scopes), laid over the guarded transport, plus opts for
// what is not about transport (the endpoint). wrap, when set, wraps the guarded transport
// (tests record requests with it).
func (g *Guard) GoogleOptions(ctx context.Context, scopes []string, opts []option.ClientOption,
	wrap func(http.RoundTripper) http.RoundTripper) ([]option.ClientOption, error) {
	var base http.RoundTripper = g.Transport()
	if wrap != nil {
		base = wrap(base)
	}
	rt, err := htransport.NewTransport(ctx, base, append(append([]option.ClientOption(nil), opts...), option.WithScopes(scopes...))...)
	if err != nil {
		return nil, fmt.Errorf("building the guarded HTTP transport: %w", err)
	}
	return append(append([]option.ClientOption(nil), opts...), option.WithHTTPClient(&http.Client{Transport: rt})), nil
}
