package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"kollect.dev/hub/internal/auth"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// TestRefusedCallsAreAuditedOncePerKindAndWindow: an address looping over a bad token costs the
// audit log one row per kind of refusal and minute, not one per call: the first is written at
// once, the rest of the window as one row that counts them. Every call is still refused and
// counted (kollect_hub_refused_calls_total).
func TestRefusedCallsAreAuditedOncePerKindAndWindow(t *testing.T) {
	t.Parallel()
	h := startHub(t, "") // the per-address failure limit is off: every call reaches the guard
	ctx := context.Background()
	bad := h.fleet("kat_looping_attacker")
	refuse := func(n int) {
		t.Helper()
		for range n {
			_, err := bad.ListClusters(ctx, connect.NewRequest(&fleetv1.ListClustersRequest{}))
			wantCode(t, err, connect.CodeUnauthenticated, "a bad token")
		}
	}
	refuse(50)
	h.clock.Advance(time.Minute)
	refuse(1) // opens the next window, which writes the summary of the first

	var rows []*fleetv1.AuditEvent
	eventually(t, func() error {
		resp, err := h.admin.ListAuditEvents(ctx, connect.NewRequest(&fleetv1.ListAuditEventsRequest{}))
		if err != nil {
			return err
		}
		rows = rows[:0]
		for _, e := range resp.Msg.GetEvents() {
			if e.GetAction() == auth.AuditFailed {
				rows = append(rows, e)
			}
		}
		if len(rows) != 3 {
			return fmt.Errorf("%d AuthFailed rows, want 3 (first, summary of 49, next window's first): %v", len(rows), rows)
		}
		return nil
	})
	summaries := 0
	for _, e := range rows {
		if strings.HasPrefix(e.GetDetail(), "49 more since ") {
			summaries++
		}
	}
	if summaries != 1 {
		t.Fatalf("no row counts the 49 refusals audited together: %v", rows)
	}
	if got := metricValue(t, h, h.srv.AdminToken, "kollect_hub_refused_calls_total"); got != 51 {
		t.Fatalf("kollect_hub_refused_calls_total %v, want every one of the 51 refusals counted", got)
	}
}
