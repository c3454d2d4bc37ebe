package hubclient

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/client-go/dynamic"

	"kollect.dev/agent/internal/preview"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// previewReportTimeout bounds one ReportPreview call. It starts when the evaluation ends, not
// at the request's deadline: the hub keeps a late answer until the preview expires.
const previewReportTimeout = 10 * time.Second

// startPreview evaluates a preview off the stream goroutine, so that configuration keeps
// flowing meanwhile, and answers it. At most one evaluation runs at a time: a preview that
// arrives while another is evaluated is answered at once with a "busy" error rather than
// queued, because the hub waits seconds for an answer, and a queue behind a large cluster's
// listing would only make every answer late. A preview never applies anything.
func (h *Client) startPreview(ctx context.Context, req *fleetv1.PreviewRequest) {
	select {
	case h.previewing <- struct{}{}:
	default:
		h.o.Log.Info("preview refused: another preview is being evaluated", "preview", req.GetId())
		h.reportPreview(ctx, &fleetv1.PreviewResult{PreviewId: req.GetId(), Cluster: h.o.Cluster, AgentVersion: h.o.AgentVersion,
			Error: "busy: the agent is evaluating another preview; ask again once it has answered", EvaluatedAt: timestamppb.Now()})
		return
	}
	go func() {
		defer func() { <-h.previewing }()
		env, err := h.previewEnv()
		var res *fleetv1.PreviewResult
		if err != nil {
			res = &fleetv1.PreviewResult{PreviewId: req.GetId(), Cluster: h.o.Cluster, AgentVersion: h.o.AgentVersion,
				Error: err.Error(), EvaluatedAt: timestamppb.Now()}
		} else {
			res = preview.Evaluate(ctx, req, env)
		}
		h.reportPreview(ctx, res)
	}()
}

// previewEnv is what previews read the cluster with: the agent's own credentials, its
// RESTMapper (kinds whose CRD appears later are found) and the applier's allowlist.
func (h *Client) previewEnv() (preview.Env, error) {
	dyn, err := dynamic.NewForConfig(h.cfg)
	if err != nil {
		return preview.Env{}, fmt.Errorf("preview: dynamic client: %w", err)
	}
	return preview.Env{Dynamic: dyn, Mapper: h.c.RESTMapper(), Cluster: h.o.Cluster, Allow: h.o.Allowlist(),
		Samples: h.o.PreviewSamples, AgentVersion: h.o.AgentVersion}, nil
}

// reportPreview sends an answer. Only the preview's id and the error are logged: an answer's
// figures are the hub's to show, and its samples are row data.
func (h *Client) reportPreview(ctx context.Context, res *fleetv1.PreviewResult) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), previewReportTimeout)
	defer cancel()
	if _, err := h.api.ReportPreview(cctx, connect.NewRequest(&fleetv1.ReportPreviewRequest{ClusterName: h.o.Cluster, Result: res})); err != nil {
		h.o.Log.Error(err, "answering a bundle preview", "preview", res.GetPreviewId())
		return
	}
	h.o.Log.V(1).Info("answered a bundle preview", "preview", res.GetPreviewId(), "targets", len(res.GetTargets()))
}
