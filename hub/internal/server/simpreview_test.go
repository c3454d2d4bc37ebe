package server_test

import (
	"context"
	"fmt"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// previewAnswer is what a simulated agent answers to a preview: one target of 12 objects, two
// of them failing on one attribute, and one inventory.
func previewAnswer(cluster string, p *fleetv1.PreviewRequest) *fleetv1.PreviewResult {
	return &fleetv1.PreviewResult{PreviewId: p.GetId(), Cluster: cluster, DistinctValuesLimit: 1000,
		Took: durationpb.New(3_000_000), EvaluatedAt: timestamppb.Now(), AgentVersion: "v0.1.0",
		Targets: []*fleetv1.PreviewTarget{{Target: "team-a/deployments", Profile: "team-a/deployments", Group: "apps",
			Version: "v1", Kind: "Deployment", KindState: fleetv1.PreviewKindState_PREVIEW_KIND_STATE_SERVED,
			ObjectsListed: 12, ObjectsMatched: 10, Rows: 8, Failed: 2,
			Attributes: []*fleetv1.PreviewAttribute{
				{Name: "replicas", Values: 8, DistinctValues: 3},
				{Name: "images", Values: 8, DistinctValues: 5, Errors: 2, ErrorSamples: []*fleetv1.PreviewObjectError{
					{Object: "team-a/broken", Message: "no such key: containers"}}},
			}}},
		Inventories: []*fleetv1.PreviewInventory{{Inventory: "team-a/workloads", Targets: []string{"team-a/deployments"},
			Rows: 8, EstimatedBytes: 2048}},
	}
}

// answerPreview answers a preview as the real agent does, with ReportPreview.
func (a *simAgent) answerPreview(ctx context.Context, p *fleetv1.PreviewRequest) {
	_, _ = a.client.ReportPreview(ctx, connect.NewRequest(&fleetv1.ReportPreviewRequest{ClusterName: a.name,
		Result: previewAnswer(a.name, p)}))
}

// previewsSeen returns the messages that carried a preview.
func (a *simAgent) previewsSeen() []*fleetv1.WatchConfigResponse {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]*fleetv1.WatchConfigResponse(nil), a.previews...)
}

// config returns the last configuration the agent applied.
func (a *simAgent) config() *fleetv1.WatchConfigResponse {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cfg
}

// waitOnline waits until the hub shows every agent online (a heartbeat accepted).
func (h *testHub) waitOnline(t testing.TB, agents ...*simAgent) {
	t.Helper()
	names := make([]string, len(agents))
	for i, a := range agents {
		names[i] = a.name
	}
	h.waitOnlineNames(t, names...)
}

// waitOnlineNames is waitOnline for clusters by name.
func (h *testHub) waitOnlineNames(t testing.TB, names ...string) {
	t.Helper()
	eventually(t, func() error {
		list, err := h.admin.ListClusters(context.Background(), connect.NewRequest(&fleetv1.ListClustersRequest{}))
		if err != nil {
			return err
		}
		state := map[string]fleetv1.ClusterState{}
		for _, c := range list.Msg.GetClusters() {
			state[c.GetName()] = c.GetState()
		}
		for _, n := range names {
			if state[n] != fleetv1.ClusterState_CLUSTER_STATE_ONLINE {
				return fmt.Errorf("%s is %v, not online", n, state[n])
			}
		}
		return nil
	})
}
