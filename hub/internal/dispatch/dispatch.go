package dispatch

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"kollect.dev/hub/internal/assign"
	"kollect.dev/hub/internal/store"
)

// Conn is one agent's open WatchConfig stream.
type Conn struct {
	Cluster string
	// Wake receives a value when the cluster's configuration may have changed.
	Wake chan struct{}
	// Done is closed when the hub ends the stream (revocation, replacement); Err says why.
	Done chan struct{}

	mu       sync.Mutex
	sent     string // digest last sent, to wake only streams whose config changed
	err      error
	doneOnce sync.Once
}

// Sent records the digest the stream has just sent.
func (c *Conn) Sent(digest string) {
	c.mu.Lock()
	c.sent = digest
	c.mu.Unlock()
}

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
	default: // already pending: one wake-up reads the newest state anyway
	}
}

func (c *Conn) close(err error) {
	c.doneOnce.Do(func() {
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
		close(c.Done)
	})
}

// Dispatcher wakes agents' streams when their configuration changes.
type Dispatcher struct {
	store   store.Store
	builder *assign.Builder
	log     *slog.Logger
	kick    chan struct{}

	mu    sync.Mutex
	conns map[string]map[*Conn]struct{}
}

// New returns a Dispatcher; call Run to start it.
func New(s store.Store, b *assign.Builder, log *slog.Logger) *Dispatcher {
	return &Dispatcher{store: s, builder: b, log: log, kick: make(chan struct{}, 1),
		conns: map[string]map[*Conn]struct{}{}}
}

// Subscribe registers a stream of cluster; call the returned function when it ends.
func (d *Dispatcher) Subscribe(cluster string) (*Conn, func()) {
	c := &Conn{Cluster: cluster, Wake: make(chan struct{}, 1), Done: make(chan struct{})}
	d.mu.Lock()
	if d.conns[cluster] == nil {
		d.conns[cluster] = map[*Conn]struct{}{}
	}
	d.conns[cluster][c] = struct{}{}
	d.mu.Unlock()
	return c, func() {
		d.mu.Lock()
		delete(d.conns[cluster], c)
		if len(d.conns[cluster]) == 0 {
			delete(d.conns, cluster)
		}
		d.mu.Unlock()
	}
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

// Disconnect ends every stream of cluster on this replica with err.
func (d *Dispatcher) Disconnect(cluster string, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for c := range d.conns[cluster] {
		c.close(err)
	}
}

// Kick asks for an immediate check after a local change of desired configuration.
func (d *Dispatcher) Kick() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// Run checks for changes on every Kick and every poll until ctx ends.
func (d *Dispatcher) Run(ctx context.Context, poll time.Duration) {
	t := time.NewTicker(poll)
	defer t.Stop()
	var epoch int64 = -1
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.kick:
		case <-t.C:
			e, err := d.store.ConfigEpoch(ctx)
			if err != nil {
				if !errors.Is(err, context.Canceled) {
					d.log.WarnContext(ctx, "polling config epoch", "error", err)
				}
				continue
			}
			if e == epoch {
				continue
			}
			epoch = e
		}
		if err := d.wakeChanged(ctx); err != nil && !errors.Is(err, context.Canceled) {
			d.log.WarnContext(ctx, "dispatching configuration", "error", err)
		}
	}
}

// wakeChanged wakes every stream whose cluster's desired digest differs from what it sent.
func (d *Dispatcher) wakeChanged(ctx context.Context) error {
	digests, _, err := d.builder.Digests(ctx)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for cluster, set := range d.conns {
		want, ok := digests[cluster]
		if !ok {
			want = assign.EmptyDigest
		}
		for c := range set {
			if c.lastSent() != want {
				c.wake()
			}
		}
	}
	return nil
}
