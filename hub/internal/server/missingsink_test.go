package server_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// TestFreshnessShowsASinkThatDoesNotExist: a heartbeat's sink marked not found (an inventory
// names a sink the cluster does not have) is a cell of the export-freshness matrix with
// sink_not_found, its error and a terminal class, and counts as the cluster's sink error,
// beside the cell of the sink that exports (the control).
func TestFreshnessShowsASinkThatDoesNotExist(t *testing.T) {
	t.Parallel()
	h := startHub(t, "")
	ctx := context.Background()
	agent, _ := h.register(t, h.bootstrapToken(t, time.Hour, 1, false).GetSecret(), "alpha", nil)
	const reason = "sink not found: no KollectDatabaseSink team/gone in this cluster, named by inventory team/pods"
	_, err := agent.ReportStatus(ctx, connect.NewRequest(&fleetv1.ReportStatusRequest{Status: &fleetv1.AgentStatus{
		AgentVersion: "v0.1.0",
		Sinks: []*fleetv1.SinkStatus{
			{Kind: "KollectDatabaseSink", Namespace: "team", Name: "db", Type: "postgres", LastSuccessTime: timestamppb.New(h.clock.Now())},
			{Kind: "KollectDatabaseSink", Namespace: "team", Name: "gone", NotFound: true, LastError: reason,
				ErrorClass: fleetv1.SinkErrorClass_SINK_ERROR_CLASS_TERMINAL},
		}}}))
	if err != nil {
		t.Fatal(err)
	}
	fh := fleetHealth(t, h)
	cells := map[string]*fleetv1.SinkFreshness{}
	for _, c := range fh.GetExportFreshness() {
		cells[c.GetSinkName()] = c
	}
	if db := cells["db"]; db == nil || db.GetSinkNotFound() || db.GetLastError() != "" || db.GetLag() == nil {
		t.Fatalf("the exporting sink's cell: %v", db)
	}
	gone := cells["gone"]
	if gone == nil || !gone.GetSinkNotFound() || gone.GetLastError() != reason ||
		gone.GetErrorClass() != fleetv1.SinkErrorClass_SINK_ERROR_CLASS_TERMINAL || gone.GetLastSuccessTime() != nil {
		t.Fatalf("the missing sink's cell: %v", gone)
	}
	if c := clusterNamed(t, h, "alpha"); c.GetSinkErrors() != 1 {
		t.Fatalf("cluster alpha has %d sink errors, want the missing sink's", c.GetSinkErrors())
	}
}
