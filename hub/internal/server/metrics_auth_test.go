package server_test

import (
	"context"
	"net/http"
	"testing"

	"connectrpc.com/connect"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// TestMetricsNeedAViewerToken: /metrics, on the API port, answers 401 to a request without a
// token (never the series, which name every cluster and sink) and 200 to a viewer's token.
func TestMetricsNeedAViewerToken(t *testing.T) {
	t.Parallel()
	h := startHub(t, "")
	req, err := http.NewRequest(http.MethodGet, h.url+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := h.httpClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
		t.Fatalf("/metrics without a token: %d (WWW-Authenticate %q), want 401 with a challenge", resp.StatusCode,
			resp.Header.Get("WWW-Authenticate"))
	}
	viewer, err := h.admin.CreateAPIToken(context.Background(), connect.NewRequest(&fleetv1.CreateAPITokenRequest{
		Name: "prometheus", Role: fleetv1.Role_ROLE_VIEWER}))
	if err != nil {
		t.Fatal(err)
	}
	if code := getMetrics(t, h, viewer.Msg.GetSecret()); code != http.StatusOK {
		t.Fatalf("/metrics with a viewer token: %d", code)
	}
}
