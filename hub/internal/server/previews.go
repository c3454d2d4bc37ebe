package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"kollect.dev/hub/internal/auth"
	"kollect.dev/hub/internal/bundle"
	"kollect.dev/hub/internal/health"
	"kollect.dev/hub/internal/labelsel"
	"kollect.dev/hub/internal/store"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// Preview limits (see preview.proto).
const (
	maxPreviewSamples     = 5
	defaultPreviewTimeout = 10 * time.Second
	maxPreviewTimeout     = 60 * time.Second
	// maxPreviewAnswer bounds one agent's answer: figures per target and attribute, three
	// error samples each and at most five sample rows per target fit many times over.
	maxPreviewAnswer = 1 << 20
	// previewReread is how often a waiting PreviewBundle reads the answers when no
	// notification came sooner (an answer recorded through another replica whose
	// notification was lost).
	previewReread = 100 * time.Millisecond
)

// PreviewBundle implements FleetService.
func (f *fleetService) PreviewBundle(ctx context.Context, req *connect.Request[fleetv1.PreviewBundleRequest]) (*connect.Response[fleetv1.PreviewBundleResponse], error) {
	m := req.Msg
	if m.GetBundle() != "" {
		if errs := validation.IsDNS1123Label(m.GetBundle()); len(errs) > 0 {
			return nil, invalid("bundle name %q: %s", m.GetBundle(), strings.Join(errs, ", "))
		}
	}
	if n := m.GetMaxSamples(); n < 0 || n > maxPreviewSamples {
		return nil, invalid("max_samples %d: must be 0 to %d", n, maxPreviewSamples)
	}
	timeout := defaultPreviewTimeout
	if m.GetTimeout() != nil {
		timeout = m.GetTimeout().AsDuration()
		if timeout <= 0 || timeout > maxPreviewTimeout {
			return nil, invalid("timeout %s: must be above 0 and at most %s", timeout, maxPreviewTimeout)
		}
	}
	sel, err := labelsel.FromProto(m.GetClusterSelector())
	if err != nil {
		return nil, invalid("%v", err)
	}
	if len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 0 {
		return nil, invalid("a preview needs a cluster selector (for example ring=canary): it asks a few clusters, not the whole fleet")
	}
	matcher, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return nil, invalid("invalid cluster selector: %v", err)
	}
	var bad *bundle.InvalidError
	if _, err := f.s.validator.Validate(ctx, m.GetManifests()); errors.As(err, &bad) {
		return nil, connect.NewError(connect.CodeInvalidArgument, bad)
	} else if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	asked, notConnected, err := f.s.previewClusters(ctx, matcher)
	if err != nil {
		return nil, err
	}
	selector := metav1.FormatLabelSelector(sel)
	if len(asked)+len(notConnected) == 0 {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("cluster selector %s selects no cluster", selector))
	}
	id, err := auth.NewID()
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	now := f.s.cfg.Now()
	p := store.Preview{ID: "pv-" + id, Bundle: m.GetBundle(), RequestedBy: actor(ctx), Manifests: m.GetManifests(),
		MaxSamples: m.GetMaxSamples(), Clusters: asked, NotConnected: notConnected, CreatedAt: now,
		Deadline: now.Add(timeout), ExpiresAt: now.Add(store.PreviewTTL)}
	if err := f.s.store.CreatePreview(ctx, p); err != nil {
		return nil, storeError(err)
	}
	f.s.previews.created.Inc()
	// Streams on this replica get it now; the store's notification brings it to the others'.
	streams := f.s.dispatcher.Preview(previewRequest(p), p.Clusters, time.Now().Add(timeout))
	auth.Note(ctx, "preview/"+p.ID, fmt.Sprintf("bundle=%q selector=%q clusters asked=%d not connected=%d max_samples=%d",
		p.Bundle, selector, len(asked), len(notConnected), p.MaxSamples))
	f.s.log.InfoContext(ctx, "bundle preview asked", "preview", p.ID, "bundle", p.Bundle, "selector", selector,
		"asked", len(asked), "notConnected", len(notConnected), "localStreams", streams, "by", actor(ctx))
	out, err := f.s.awaitPreview(ctx, p, timeout)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(out), nil
}

// GetPreview implements FleetService.
func (f *fleetService) GetPreview(ctx context.Context, req *connect.Request[fleetv1.GetPreviewRequest]) (*connect.Response[fleetv1.GetPreviewResponse], error) {
	p, err := f.s.store.GetPreview(ctx, req.Msg.GetPreviewId())
	if err == nil && !f.s.cfg.Now().Before(p.ExpiresAt) {
		err = fmt.Errorf("preview %s expired at %s: %w", p.ID, p.ExpiresAt.Format(time.RFC3339), store.ErrNotFound)
	}
	if err != nil {
		return nil, storeError(err)
	}
	out, err := f.s.previewResponse(ctx, p)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fleetv1.GetPreviewResponse{Preview: out}), nil
}

// ReportPreview implements AgentService.
func (a *agentService) ReportPreview(ctx context.Context, req *connect.Request[fleetv1.ReportPreviewRequest]) (*connect.Response[fleetv1.ReportPreviewResponse], error) {
	agent, ok := auth.AgentFrom(ctx)
	if !ok {
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("no agent identity"))
	}
	if err := a.checkName(ctx, agent.Name, req.Msg.GetClusterName()); err != nil {
		return nil, err
	}
	refuse := func(err error) error {
		a.s.previews.answers.WithLabelValues("refused").Inc()
		return err
	}
	if ok, wait := a.s.previews.limiter.Allow(agent.Name); !ok {
		return nil, refuse(connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("cluster %s answers previews too often: retry in %s",
			agent.Name, wait.Round(time.Millisecond))))
	}
	res := req.Msg.GetResult()
	if res == nil || res.GetPreviewId() == "" {
		return nil, refuse(invalid("result with a preview_id is required"))
	}
	if res.GetCluster() != "" && res.GetCluster() != agent.Name {
		return nil, refuse(invalid("result.cluster %q is not this agent's cluster %s", res.GetCluster(), agent.Name))
	}
	if size := proto.Size(res); size > maxPreviewAnswer {
		return nil, refuse(invalid("the answer to preview %s is %d bytes, over the limit of %d: fewer samples, or fewer targets per preview",
			res.GetPreviewId(), size, maxPreviewAnswer))
	}
	res = proto.CloneOf(res)
	res.Cluster = agent.Name
	// An agent never sends more samples than asked for; should one, the hub keeps no more.
	p, err := a.s.store.GetPreview(ctx, res.GetPreviewId())
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, refuse(storeError(err))
	}
	if err == nil {
		for _, t := range res.GetTargets() {
			t.Samples = t.Samples[:min(len(t.Samples), int(p.MaxSamples))]
		}
	}
	raw, err := protojson.Marshal(res)
	if err != nil {
		return nil, refuse(invalid("result: %v", err))
	}
	err = a.s.store.RecordPreviewAnswer(ctx, store.PreviewAnswer{PreviewID: res.GetPreviewId(), Cluster: agent.Name,
		Result: string(raw), ReceivedAt: a.s.cfg.Now()})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, refuse(connect.NewError(connect.CodeNotFound, fmt.Errorf("preview %s is unknown or expired", res.GetPreviewId())))
	case errors.Is(err, store.ErrNotAsked):
		return nil, refuse(connect.NewError(connect.CodePermissionDenied, fmt.Errorf("preview %s did not ask cluster %s",
			res.GetPreviewId(), agent.Name)))
	case err != nil:
		return nil, refuse(storeError(err))
	}
	result := "evaluated"
	if res.GetError() != "" {
		result = "failed"
	}
	a.s.previews.answers.WithLabelValues(result).Inc()
	a.s.previews.answered.Fire()
	return connect.NewResponse(&fleetv1.ReportPreviewResponse{}), nil
}

// previewClusters splits the clusters sel selects into those to ask (online: a heartbeat
// within the stale threshold, as ListClusters shows) and the others, each sorted.
func (s *Server) previewClusters(ctx context.Context, sel labels.Selector) (asked, notConnected []string, err error) {
	snap, err := s.view.Snapshot(ctx)
	if err != nil {
		return nil, nil, connect.NewError(connect.CodeInternal, err)
	}
	for _, c := range snap.Clusters {
		// A preview carries manifests and reads the cluster: not for a cluster whose
		// registration no admin has approved (nor a revoked one, which is never online).
		if !sel.Matches(labels.Set(c.GetLabels())) || health.PendingApproval(c) {
			continue
		}
		if c.GetState() == fleetv1.ClusterState_CLUSTER_STATE_ONLINE {
			asked = append(asked, c.GetName())
		} else {
			notConnected = append(notConnected, c.GetName())
		}
	}
	slices.Sort(asked)
	slices.Sort(notConnected)
	return asked, notConnected, nil
}

// previewRequest is what the agents of p's clusters receive.
func previewRequest(p store.Preview) *fleetv1.PreviewRequest {
	return &fleetv1.PreviewRequest{Id: p.ID, Manifests: p.Manifests, MaxSamples: p.MaxSamples,
		Deadline: timestamppb.New(p.Deadline)}
}

// awaitPreview reads p's answers until every asked cluster answered or timeout passed, at
// every answer this replica hears of and at least every previewReread.
func (s *Server) awaitPreview(ctx context.Context, p store.Preview, timeout time.Duration) (*fleetv1.PreviewBundleResponse, error) {
	expired := time.NewTimer(timeout)
	defer expired.Stop()
	reread := time.NewTicker(previewReread)
	defer reread.Stop()
	for {
		answered := s.previews.answered.C() // taken before the read: no answer falls between
		out, err := s.previewResponse(ctx, p)
		if err != nil || len(out.GetPending()) == 0 {
			return out, err
		}
		select {
		case <-ctx.Done():
			return nil, connect.NewError(connect.CodeCanceled, fmt.Errorf("waiting for preview %s: %w", p.ID, ctx.Err()))
		case <-expired.C:
			return s.previewResponse(ctx, p)
		case <-reread.C:
		case <-answered:
		}
	}
}

// previewResponse is p with the answers stored so far.
func (s *Server) previewResponse(ctx context.Context, p store.Preview) (*fleetv1.PreviewBundleResponse, error) {
	answers, err := s.store.PreviewAnswers(ctx, p.ID)
	if err != nil {
		return nil, storeError(err)
	}
	out := &fleetv1.PreviewBundleResponse{PreviewId: p.ID, NotConnected: p.NotConnected}
	got := map[string]bool{}
	for _, a := range answers {
		r := &fleetv1.PreviewResult{}
		if err := protojson.Unmarshal([]byte(a.Result), r); err != nil {
			// Written by this hub from a decoded message: a corrupt row. Say so for that
			// cluster rather than failing the whole preview.
			r = &fleetv1.PreviewResult{PreviewId: p.ID, Cluster: a.Cluster, Error: "the hub could not read this answer back: " + err.Error()}
		}
		got[a.Cluster] = true
		out.Results = append(out.Results, r)
	}
	for _, c := range p.Clusters {
		if !got[c] {
			out.Pending = append(out.Pending, c)
		}
	}
	return out, nil
}
