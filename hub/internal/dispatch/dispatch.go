package dispatch

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"kollect.dev/hub/internal/assign"
	"kollect.dev/hub/internal/store"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// Conn is one agent's open WatchConfig stream.
type Conn struct {
	Cluster string
	// Wake receives a value when the cluster's configuration may have changed.
	Wake chan struct{}
	// Done is closed when the hub ends the stream (revocation, replacement); Err says why.
	Done chan struct{}
	// Previews receives the previews the stream must relay to its agent (Preview).
	Previews chan *fleetv1.PreviewRequest

	mu       sync.Mutex
	sent     string // digest last sent, to wake only streams whose config changed
	err      error
	doneOnce sync.Once
	// offered holds the IDs of the previews offered to this stream: a preview reaches a
	// stream once, however many replicas' notifications announce it.
	offered map[string]bool
}

// previewQueue is how many previews a stream holds before it sent them; a preview offered
// to a full queue is dropped for that stream (its cluster stays pending), since an agent
// that cannot take a few previews is stuck anyway and a requester must not wait on it.
const previewQueue = 8

// offer queues p for the stream unless it was offered already; false when it was, or when
// the queue is full.
func (c *Conn) offer(p *fleetv1.PreviewRequest) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.offered[p.GetId()] {
		return false
	}
	select {
	case c.Previews <- p:
		c.offered[p.GetId()] = true
		return true
	default:
		return false
	}
}

// Sent records the digest the stream has just sent.
func (c *Conn) Sent(digest string) {
	c.mu.Lock()
	c.sent = digest
	c.mu.Unlock()
}

// LastSent is the digest the stream last sent.
func (c *Conn) LastSent() string { return c.lastSent() }

func (c *Conn) lastSent() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sent
}

// Err is why the hub closed the stream.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *Conn) wake() {
	select {
	case c.Wake <- struct{}{}:
	default: // already pending: one wake-up reads the newest snapshot anyway
	}
}

// End ends the stream with err (its Done closes), as Disconnect ends every stream of its
// cluster.
func (c *Conn) End(err error) { c.close(err) }

func (c *Conn) close(err error) {
	c.doneOnce.Do(func() {
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
		close(c.Done)
	})
}

// snapshot is the desired configuration of every live cluster at one config epoch.
type snapshot struct {
	epoch   int64
	live    map[string]bool
	configs map[string]*fleetv1.WatchConfigResponse // clusters with at least one bundle
	empty   *fleetv1.WatchConfigResponse
}

// Dispatcher distributes configuration to agents' streams.
type Dispatcher struct {
	store   store.Store
	builder *assign.Builder
	log     *slog.Logger
	kick    chan struct{}
	// poke asks Run to check the config epoch now, as a poll would (Poke).
	poke chan struct{}
	snap atomic.Pointer[snapshot]
	// live is the fleet's membership as the last refresh read it; only refresh (Run's
	// goroutine) touches it.
	live liveClusters

	mu    sync.Mutex
	conns map[string]map[*Conn]struct{}
	// open holds the previews whose requester still waits, by ID: a stream opened meanwhile
	// (an agent reconnecting, or failing over from another replica) gets them too.
	open map[string]openPreview
}

// openPreview is a preview a stream opened before until still gets.
type openPreview struct {
	req      *fleetv1.PreviewRequest
	clusters map[string]bool
	until    time.Time
}

// New returns a Dispatcher; call Run to start it.
func New(s store.Store, b *assign.Builder, log *slog.Logger) *Dispatcher {
	return &Dispatcher{store: s, builder: b, log: log, kick: make(chan struct{}, 1), poke: make(chan struct{}, 1),
		conns: map[string]map[*Conn]struct{}{}, open: map[string]openPreview{}}
}

// Current is the configuration cluster should hold, from the newest snapshot; false when the
// snapshot does not know the cluster (revoked, or registered after it was built: a Kick is
// then on its way).
func (d *Dispatcher) Current(cluster string) (*fleetv1.WatchConfigResponse, bool) {
	s := d.snap.Load()
	if s == nil || !s.live[cluster] {
		return nil, false
	}
	if c, ok := s.configs[cluster]; ok {
		return c, true
	}
	return s.empty, true
}

// Subscribe registers a stream of cluster; call the returned function when it ends.
func (d *Dispatcher) Subscribe(cluster string) (*Conn, func()) {
	c, leave, _ := d.SubscribeAtMost(cluster, 0)
	return c, leave
}

// SubscribeAtMost is Subscribe unless cluster already holds max streams on this dispatcher
// (max 0: no limit); then it registers nothing and returns false.
func (d *Dispatcher) SubscribeAtMost(cluster string, max int) (*Conn, func(), bool) {
	c := &Conn{Cluster: cluster, Wake: make(chan struct{}, 1), Done: make(chan struct{}),
		Previews: make(chan *fleetv1.PreviewRequest, previewQueue), offered: map[string]bool{}}
	d.mu.Lock()
	if max > 0 && len(d.conns[cluster]) >= max {
		d.mu.Unlock()
		return nil, nil, false
	}
	if d.conns[cluster] == nil {
		d.conns[cluster] = map[*Conn]struct{}{}
	}
	d.conns[cluster][c] = struct{}{}
	now := time.Now()
	for id, o := range d.open {
		switch {
		case !now.Before(o.until):
			delete(d.open, id)
		case o.clusters[cluster]:
			c.offer(o.req)
		}
	}
	d.mu.Unlock()
	if _, known := d.Current(cluster); !known {
		d.Kick()
	}
	return c, func() {
		d.mu.Lock()
		delete(d.conns[cluster], c)
		if len(d.conns[cluster]) == 0 {
			delete(d.conns, cluster)
		}
		d.mu.Unlock()
	}, true
}

// Connected is the number of open streams.
func (d *Dispatcher) Connected() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, set := range d.conns {
		n += len(set)
	}
	return n
}

// Hide makes the current snapshot forget cluster until the next one is built: a cluster
// registered again by an agent that must not receive its predecessor's configuration (one
// pending approval) gets nothing from a snapshot built before the registration. Hide copies
// the snapshot's membership, so it is for that rare case, not for every registration.
func (d *Dispatcher) Hide(cluster string) {
	s := d.snap.Load()
	if s == nil || !s.live[cluster] {
		return
	}
	hidden := *s
	hidden.live = make(map[string]bool, len(s.live))
	for name := range s.live {
		if name != cluster {
			hidden.live[name] = true
		}
	}
	// Lost to a newer snapshot: the caller kicks another, read from the store after its change.
	d.snap.CompareAndSwap(s, &hidden)
}

// Disconnect ends every stream of cluster on this replica with err.
func (d *Dispatcher) Disconnect(cluster string, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for c := range d.conns[cluster] {
		c.close(err)
	}
}

// Preview offers p to every stream this replica holds of the named clusters, each stream at
// most once per preview, and returns how many streams took it. Streams of those clusters
// opened before until get it too.
func (d *Dispatcher) Preview(p *fleetv1.PreviewRequest, clusters []string, until time.Time) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	for id, o := range d.open {
		if !now.Before(o.until) {
			delete(d.open, id)
		}
	}
	if _, known := d.open[p.GetId()]; !known && now.Before(until) {
		set := make(map[string]bool, len(clusters))
		for _, c := range clusters {
			set[c] = true
		}
		d.open[p.GetId()] = openPreview{req: p, clusters: set, until: until}
	}
	n := 0
	for _, cluster := range clusters {
		for c := range d.conns[cluster] {
			if c.offer(p) {
				n++
			}
		}
	}
	return n
}

// Kick asks for a new snapshot after a local change of desired configuration.
func (d *Dispatcher) Kick() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// Poke asks for the config epoch to be checked now, as the next poll would: another
// replica said it changed the configuration. A snapshot is built only when the epoch moved,
// so this replica's own changes, which it has already sent, cost one small read.
func (d *Dispatcher) Poke() {
	select {
	case d.poke <- struct{}{}:
	default:
	}
}

// minGap is the least time between two snapshots started by Kick.
const minGap = 100 * time.Millisecond

// Run builds a snapshot at once, then on every Kick and whenever a poll finds the config epoch
// moved, until ctx ends.
func (d *Dispatcher) Run(ctx context.Context, poll time.Duration) {
	t := time.NewTicker(poll)
	defer t.Stop()
	d.refreshLogged(ctx)
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.kick:
			// Registrations arrive in bursts (a fleet rolling out agents, or reconnecting
			// after a hub restart); a short gap lets one snapshot serve the whole burst
			// instead of one snapshot of the whole fleet per agent.
			if wait := minGap - time.Since(last); wait > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
			}
		case <-t.C:
			if !d.epochMoved(ctx) {
				continue
			}
		case <-d.poke:
			if !d.epochMoved(ctx) {
				continue
			}
		}
		d.refreshLogged(ctx)
		last = time.Now()
	}
}

// epochMoved reports whether the config epoch moved past the current snapshot's.
func (d *Dispatcher) epochMoved(ctx context.Context) bool {
	e, err := d.store.ConfigEpoch(ctx)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			d.log.WarnContext(ctx, "polling config epoch", "error", err)
		}
		return false
	}
	s := d.snap.Load()
	return s == nil || s.epoch != e
}

func (d *Dispatcher) refreshLogged(ctx context.Context) {
	if err := d.refresh(ctx); err != nil && !errors.Is(err, context.Canceled) {
		d.log.WarnContext(ctx, "building the fleet's configuration", "error", err)
	}
}

// refresh builds a new snapshot and wakes every stream whose configuration changed.
func (d *Dispatcher) refresh(ctx context.Context) error {
	// The epoch is read first: the data read after it is at least that new, so the poll
	// never skips a change.
	epoch, err := d.store.ConfigEpoch(ctx)
	if err != nil {
		return err
	}
	names, err := d.live.read(ctx, d.store)
	if err != nil {
		return err
	}
	desired, err := d.store.Desired(ctx, "")
	if err != nil {
		return err
	}
	now := timestamppb.Now()
	s := &snapshot{epoch: epoch, live: make(map[string]bool, len(names)), configs: map[string]*fleetv1.WatchConfigResponse{}}
	s.empty = &fleetv1.WatchConfigResponse{ConfigDigest: assign.EmptyDigest, SentAt: now}
	for _, n := range names {
		s.live[n] = true
	}
	byCluster := map[string][]store.Desired{}
	for _, r := range desired {
		byCluster[r.Cluster] = append(byCluster[r.Cluster], r)
	}
	// Most clusters share a handful of bundle sets: build each set's message once.
	shared := map[string]*fleetv1.WatchConfigResponse{}
	for cluster, rows := range byCluster {
		if !s.live[cluster] {
			continue
		}
		var key strings.Builder
		for _, r := range rows {
			key.WriteString(r.Bundle + "@" + strconv.FormatInt(r.Revision, 10) + ",")
		}
		cfg, ok := shared[key.String()]
		if !ok {
			items, err := d.builder.Assignments(ctx, rows)
			if err != nil {
				return err
			}
			cfg = &fleetv1.WatchConfigResponse{Bundles: items, ConfigDigest: assign.Digest(items), SentAt: now}
			shared[key.String()] = cfg
		}
		s.configs[cluster] = cfg
	}
	d.snap.Store(s)

	d.mu.Lock()
	defer d.mu.Unlock()
	for cluster, set := range d.conns {
		cfg, ok := d.Current(cluster)
		if !ok {
			continue
		}
		for c := range set {
			if c.lastSent() != cfg.GetConfigDigest() {
				c.wake()
			}
		}
	}
	return nil
}
