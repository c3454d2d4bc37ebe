package server

import (
	"context"
	"errors"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"kollect.dev/hub/internal/dispatch"
	"kollect.dev/hub/internal/ratelimit"
	"kollect.dev/hub/internal/store"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// previewAnswerLimit bounds each agent's ReportPreview calls: an agent answers each preview
// once (again after a reconnect), so a burst of a few and one a second is plenty.
var previewAnswerLimit = ratelimit.Limit{Burst: 10, Interval: time.Second}

// previewCleanup is how often the hub deletes expired previews and their answers.
const previewCleanup = time.Minute

// previewState is a replica's part of previews: its counters, the agents' answer limiter and
// the signal waiting PreviewBundle calls wait on.
type previewState struct {
	created  prometheus.Counter
	answers  *prometheus.CounterVec
	limiter  *ratelimit.Limiter
	answered signal
}

func newPreviewState(now func() time.Time) *previewState {
	return &previewState{
		created: prometheus.NewCounter(prometheus.CounterOpts{Name: "kollect_hub_previews_total",
			Help: "Bundle previews asked through this replica (PreviewBundle calls that asked at least the store)."}),
		answers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kollect_hub_preview_answers_total",
			Help: "Agents' answers to previews received by this replica, by result: evaluated, failed (the agent could not evaluate the bundle) or refused (unknown or expired preview, cluster not asked, too large, too frequent)."},
			[]string{"result"}),
		limiter: ratelimit.New(previewAnswerLimit, now),
	}
}

// collectors are the metrics to register.
func (p *previewState) collectors() []prometheus.Collector {
	for _, r := range []string{"evaluated", "failed", "refused"} {
		p.answers.WithLabelValues(r) // present at 0 from the start
	}
	return []prometheus.Collector{p.created, p.answers}
}

// signal wakes every waiter at once: C returns a channel closed at the next Fire.
type signal struct {
	mu sync.Mutex
	ch chan struct{}
}

// C is the channel the next Fire closes.
func (s *signal) C() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

// Fire wakes every waiter of C.
func (s *signal) Fire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

// sendPreview sends p on an agent's stream in a message that repeats the cluster's current
// configuration (same bundles, same digest): the agent applies nothing new for it, and an
// agent that does not know previews takes it for a reconnect.
func (a *agentService) sendPreview(ctx context.Context, stream *connect.ServerStream[fleetv1.WatchConfigResponse], conn *dispatch.Conn, p *fleetv1.PreviewRequest) error {
	cfg, ok := a.s.dispatcher.Current(conn.Cluster)
	if !ok {
		var err error
		if cfg, err = a.s.builder.ForCluster(ctx, conn.Cluster); err != nil {
			return connect.NewError(connect.CodeUnavailable, err)
		}
	}
	msg := &fleetv1.WatchConfigResponse{Bundles: cfg.GetBundles(), ConfigDigest: cfg.GetConfigDigest(),
		SentAt: cfg.GetSentAt(), Preview: p}
	if err := stream.Send(msg); err != nil {
		return err
	}
	conn.Sent(cfg.GetConfigDigest())
	return nil
}

// relayPreviews delivers the previews other replicas create to this replica's streams of the
// clusters they ask, and wakes waiting PreviewBundle calls at answers recorded through other
// replicas, until ctx ends (a store of one process: at once).
func (s *Server) relayPreviews(ctx context.Context, w store.PreviewWatcher) {
	w.WatchPreviews(ctx, func(kind store.PreviewEvent, id string) {
		switch kind {
		case store.PreviewAnswered:
			s.previews.answered.Fire()
		case store.PreviewCreated:
			p, err := s.store.GetPreview(ctx, id)
			if err != nil {
				if !errors.Is(err, context.Canceled) {
					s.log.WarnContext(ctx, "reading a preview another replica created", "preview", id, "error", err)
				}
				return
			}
			if now := s.cfg.Now(); now.Before(p.ExpiresAt) {
				// The deadline on this replica's clock, which the dispatcher compares with.
				s.dispatcher.Preview(previewRequest(p), p.Clusters, time.Now().Add(p.Deadline.Sub(now)))
			}
		}
	}, func(err error) {
		s.log.WarnContext(ctx, "listening for other replicas' previews; only this replica's reach its agents meanwhile", "error", err)
	})
}

// cleanPreviews deletes expired previews every previewCleanup until ctx ends; with several
// replicas each does it, which costs one indexed delete a minute each.
func (s *Server) cleanPreviews(ctx context.Context) {
	t := time.NewTicker(previewCleanup)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			n, err := s.store.DeleteExpiredPreviews(ctx, s.cfg.Now())
			if err != nil && !errors.Is(err, context.Canceled) {
				s.log.WarnContext(ctx, "deleting expired previews", "error", err)
			} else if n > 0 {
				s.log.DebugContext(ctx, "expired previews deleted", "previews", n)
			}
		}
	}
}
