package fleet

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// Sub is one WatchFleet subscriber. C is closed when the subscriber fell too far behind; it
// should end its stream so the client reconnects and starts from a full listing.
type Sub struct {
	C chan *fleetv1.WatchFleetResponse
}

// Watcher publishes the differences between successive fleet snapshots.
type Watcher struct {
	View    *View
	Bundles func(ctx context.Context) ([]*fleetv1.Bundle, error)
	// Rollouts, when set, lists the active and the most recent rollouts (without clusters).
	Rollouts func(ctx context.Context) ([]*fleetv1.Rollout, error)
	Log      *slog.Logger

	poke chan struct{}
	mu   sync.Mutex
	subs map[*Sub]struct{}
	// last published state, to send only changes
	clusters map[string]*fleetv1.Cluster
	bundles  map[string]*fleetv1.Bundle
	rollouts rolloutState
	// pokeLater is set while a Poke for changes held back by RolloutInterval is pending.
	pokeLater atomic.Bool
}

// RolloutInterval is the least time between two events of one rollout: a rollout of a large
// fleet changes with every heartbeat, and a dashboard needs at most one update a second.
const RolloutInterval = time.Second

// rolloutState is what was last published of each rollout, and when.
type rolloutState struct {
	primed bool // false until the first listing after a subscriber arrived
	last   map[int64]*fleetv1.Rollout
	sent   map[int64]time.Time
}

// NewWatcher returns a Watcher; call Run to start it.
func NewWatcher(v *View, bundles func(ctx context.Context) ([]*fleetv1.Bundle, error), log *slog.Logger) *Watcher {
	return &Watcher{View: v, Bundles: bundles, Log: log, poke: make(chan struct{}, 1), subs: map[*Sub]struct{}{}}
}

// Subscribe adds a subscriber; call the returned function when it leaves.
func (w *Watcher) Subscribe() (*Sub, func()) {
	s := &Sub{C: make(chan *fleetv1.WatchFleetResponse, 1024)}
	w.mu.Lock()
	w.subs[s] = struct{}{}
	w.mu.Unlock()
	return s, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if _, ok := w.subs[s]; ok {
			delete(w.subs, s)
			close(s.C)
		}
	}
}

// Poke asks for a prompt check after a local change.
func (w *Watcher) Poke() {
	select {
	case w.poke <- struct{}{}:
	default:
	}
}

// Run publishes changes every interval and on Poke until ctx ends.
func (w *Watcher) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.poke:
		}
		if err := w.publish(ctx); err != nil && !errors.Is(err, context.Canceled) {
			w.Log.WarnContext(ctx, "publishing fleet changes", "error", err)
		}
	}
}

// comparable strips what changes with every heartbeat without being a visible change.
func comparable(c *fleetv1.Cluster) *fleetv1.Cluster {
	cp := proto.Clone(c).(*fleetv1.Cluster)
	cp.LastHeartbeat = nil
	return cp
}

func (w *Watcher) publish(ctx context.Context) error {
	w.mu.Lock()
	idle := len(w.subs) == 0
	w.mu.Unlock()
	if idle {
		w.clusters, w.bundles = nil, nil // the next subscriber starts from a full listing
		w.rollouts = rolloutState{}
		return nil
	}
	snap, err := w.View.Snapshot(ctx)
	if err != nil {
		return err
	}
	bundles, err := w.Bundles(ctx)
	if err != nil {
		return err
	}
	now := timestamppb.Now()
	var events []*fleetv1.WatchFleetResponse
	seen := map[string]bool{}
	nextClusters := map[string]*fleetv1.Cluster{}
	for _, c := range snap.Clusters {
		seen[c.GetName()] = true
		cmp := comparable(c)
		nextClusters[c.GetName()] = cmp
		if prev, ok := w.clusters[c.GetName()]; !ok || !proto.Equal(prev, cmp) {
			events = append(events, &fleetv1.WatchFleetResponse{Event: &fleetv1.WatchFleetResponse_Cluster{Cluster: c}, Time: now})
		}
	}
	for name := range w.clusters {
		if !seen[name] {
			events = append(events, &fleetv1.WatchFleetResponse{Event: &fleetv1.WatchFleetResponse_ClusterRemoved{ClusterRemoved: name}, Time: now})
		}
	}
	nextBundles := map[string]*fleetv1.Bundle{}
	for _, b := range bundles {
		nextBundles[b.GetName()] = b
		if prev, ok := w.bundles[b.GetName()]; !ok || !proto.Equal(prev, b) {
			events = append(events, &fleetv1.WatchFleetResponse{Event: &fleetv1.WatchFleetResponse_Bundle{Bundle: b}, Time: now})
		}
	}
	for name := range w.bundles {
		if _, ok := nextBundles[name]; !ok {
			events = append(events, &fleetv1.WatchFleetResponse{Event: &fleetv1.WatchFleetResponse_BundleRemoved{BundleRemoved: name}, Time: now})
		}
	}
	w.clusters, w.bundles = nextClusters, nextBundles
	rolloutEvents, err := w.rolloutEvents(ctx, now)
	if err != nil {
		return err
	}
	events = append(events, rolloutEvents...)

	w.mu.Lock()
	defer w.mu.Unlock()
	for s := range w.subs {
		for _, ev := range events {
			select {
			case s.C <- ev:
			default:
				// Too slow: drop it rather than block everyone; it reconnects and relists.
				delete(w.subs, s)
				close(s.C)
			}
			if _, ok := w.subs[s]; !ok {
				break
			}
		}
	}
	return nil
}

// rolloutEvents returns an event for every rollout that changed since it was last published,
// at most one per rollout per RolloutInterval; a change held back is published by a later
// pass. On the first pass only active rollouts are published (WatchFleet's listing sends
// those); finished ones already in the history are not news.
func (w *Watcher) rolloutEvents(ctx context.Context, now *timestamppb.Timestamp) ([]*fleetv1.WatchFleetResponse, error) {
	if w.Rollouts == nil {
		return nil, nil
	}
	list, err := w.Rollouts(ctx)
	if err != nil {
		return nil, err
	}
	st := &w.rollouts
	if st.last == nil {
		st.last, st.sent = map[int64]*fleetv1.Rollout{}, map[int64]time.Time{}
	}
	t := now.AsTime()
	var (
		events []*fleetv1.WatchFleetResponse
		wait   time.Duration
	)
	for _, r := range list {
		active := r.GetPhase() == fleetv1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING ||
			r.GetPhase() == fleetv1.RolloutPhase_ROLLOUT_PHASE_PAUSED ||
			r.GetPhase() == fleetv1.RolloutPhase_ROLLOUT_PHASE_AWAITING_APPROVAL
		prev, known := st.last[r.GetId()]
		if !st.primed && !active {
			st.last[r.GetId()] = r
			continue
		}
		if known && proto.Equal(prev, r) {
			continue
		}
		if since := t.Sub(st.sent[r.GetId()]); since < RolloutInterval {
			wait = max(wait, RolloutInterval-since)
			continue
		}
		st.last[r.GetId()], st.sent[r.GetId()] = r, t
		events = append(events, &fleetv1.WatchFleetResponse{Event: &fleetv1.WatchFleetResponse_Rollout{Rollout: r}, Time: now})
	}
	st.primed = true
	if wait > 0 && w.pokeLater.CompareAndSwap(false, true) {
		time.AfterFunc(wait, func() {
			w.pokeLater.Store(false)
			w.Poke()
		})
	}
	return events, nil
}
