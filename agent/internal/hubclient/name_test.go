package hubclient

import (
	"context"
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	kollectv1 "kollect.dev/api/v1alpha1"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"
)

// refusingHub answers heartbeats as the hub does for a credential of cluster east.
type refusingHub struct {
	fleetv1connect.AgentServiceClient
	got []string
}

func (r *refusingHub) ReportStatus(_ context.Context, req *connect.Request[fleetv1.ReportStatusRequest]) (*connect.Response[fleetv1.ReportStatusResponse], error) {
	r.got = append(r.got, req.Msg.GetClusterName())
	if n := req.Msg.GetClusterName(); n != "east" {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("this agent runs with --cluster-name "+n+
			", but its hub credential was issued for cluster east"))
	}
	return connect.NewResponse(&fleetv1.ReportStatusResponse{}), nil
}

// TestRefusedClusterNameStopsTheClient: heartbeats carry the agent's cluster name; the hub's
// refusal of it ends the client's loops with an error naming both names, while other errors
// are retried as before.
func TestRefusedClusterNameStopsTheClient(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := kollectv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).Build()
	for _, name := range []string{"east", "west"} {
		hub := &refusingHub{}
		o := Options{Cluster: name, Log: logr.Discard()}
		h := &Client{o: o, c: c, api: hub, applier: NewApplier(c, o)}
		ctx, stop := context.WithCancel(t.Context())
		h.stopLoops = stop
		h.sendHeartbeat(ctx)
		if len(hub.got) != 1 || hub.got[0] != name {
			t.Errorf("heartbeats of %s carried cluster names %q", name, hub.got)
		}
		err := h.refusedErr()
		if name == "east" {
			if err != nil || ctx.Err() != nil {
				t.Errorf("east's own name refused: %v (loops ended: %v)", err, ctx.Err())
			}
			continue
		}
		if err == nil || ctx.Err() == nil {
			t.Fatalf("west with east's credential: refusal %v, loops ended: %v", err, ctx.Err())
		}
		for _, want := range []string{"--cluster-name west", "cluster east"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("refusal %q lacks %q", err, want)
			}
		}
	}
	h := &Client{o: Options{Cluster: "west"}}
	if h.refused(connect.NewError(connect.CodeUnavailable, errors.New("hub down"))) || h.refusedErr() != nil {
		t.Error("an unavailable hub ended the client")
	}
}
