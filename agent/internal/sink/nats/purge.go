package nats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/eventbuf"
)

var _ sink.Purger = (*Sink)(nil)

// maxPurgeRead bounds the messages Holdings and Purge read of one cluster: beyond it (a
// stream keeping a very long history) they refuse rather than read for minutes.
const maxPurgeRead = 5_000_000

// clusterFilter is the subject filter of the cluster's messages (of one inventory unless ""):
// the subject template with the cluster's and inventory's tokens and '*' for the others. The
// stream's subjects isolate one cluster only when {cluster}, {inventory} and {kind} each fill
// a whole token of the template; otherwise there is no such filter and the purge refuses.
func clusterFilter(template, cluster, inventory string) (string, error) {
	parts := strings.Split(template, ".")
	found := false
	for i, p := range parts {
		switch {
		case p == "{cluster}":
			parts[i], found = token(cluster), true
		case p == "{inventory}" && inventory != "":
			parts[i] = token(inventory)
		case p == "{inventory}" || p == "{kind}":
			parts[i] = "*"
		case strings.Contains(p, "{"):
			return "", sink.Terminalf("subject template %q has a placeholder inside a token (%s): no subject filter isolates one cluster's messages", template, p)
		}
	}
	if !found {
		return "", sink.Terminalf("subject template %q has no {cluster} token: no subject filter isolates one cluster's messages", template)
	}
	return strings.Join(parts, "."), nil
}

// streamHeld is what the stream holds of one inventory of the cluster.
type streamHeld struct {
	holding sink.Holding
	// chunks says snapshot chunks were read (the state record then counts the rows).
	chunks bool
	kvKeys []string
}

// readCluster reads the cluster's messages (headers only, with an ordered consumer on the
// cluster's subject filter) up to the stream's last sequence when it began, bounded by
// maxPurgeRead, then the last state message of each inventory found (one direct get each)
// and, with a key-value bucket, the cluster's keys. It returns, per inventory, what it holds,
// and the last sequence read. A message on the cluster's subjects that another cluster's
// agent published (a cluster name cleaning to the same token) is refused: a purge by subject
// would remove it too.
func (s *Sink) readCluster(ctx context.Context, cluster, inventory string) (map[string]*streamHeld, uint64, error) {
	filter, err := clusterFilter(s.template, cluster, inventory)
	if err != nil {
		return nil, 0, err
	}
	st, err := s.js.Stream(ctx, s.stream)
	if err != nil {
		return nil, 0, classify(fmt.Errorf("looking up stream %s: %w", s.stream, s.disconnected(err)))
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, 0, classify(fmt.Errorf("stream %s: %w", s.stream, err))
	}
	var total uint64
	for _, n := range info.State.Subjects {
		total += n
	}
	if total > maxPurgeRead {
		return nil, 0, sink.Terminalf("stream %s holds %d messages on %s, more than the %d a purge reads", s.stream, total, filter, maxPurgeRead)
	}
	last := info.State.LastSeq
	out := map[string]*streamHeld{}
	of := func(inv string) *streamHeld {
		if out[inv] == nil {
			out[inv] = &streamHeld{holding: sink.Holding{Inventory: inv}}
		}
		return out[inv]
	}
	if total > 0 {
		latest := map[string]string{} // Kollect-Key → the event of its latest message
		keyInventory := map[string]string{}
		err := s.eachMessage(ctx, filter, total, last, func(h nats.Header) error {
			if c := h.Get(hCluster); c != cluster {
				return sink.Terminalf("stream %s: a message on %s was published for cluster %q, not %s: a purge by subject would remove it too",
					s.stream, filter, c, cluster)
			}
			inv := h.Get(hInventory)
			sh := of(inv)
			switch ev := h.Get(hEvent); ev {
			case evState:
			case "snapshot":
				sh.holding.Objects++
				sh.chunks = true
			default:
				sh.holding.Objects++
				latest[h.Get(hKey)], keyInventory[h.Get(hKey)] = ev, inv
			}
			return nil
		})
		if err != nil {
			return nil, 0, err
		}
		for key, ev := range latest {
			if ev != string(export.ChangeDelete) {
				of(keyInventory[key]).holding.Rows++
			}
		}
		for inv, sh := range out {
			if err := s.readStateInto(ctx, st, cluster, inv, sh); err != nil {
				return nil, 0, err
			}
		}
	}
	if err := s.readKV(ctx, cluster, inventory, out, of); err != nil {
		return nil, 0, err
	}
	return out, last, nil
}

// eachMessage calls fn with the headers of every message on filter up to sequence last; total
// is how many the stream said there are, so the read stops without waiting for a timeout.
func (s *Sink) eachMessage(ctx context.Context, filter string, total, last uint64, fn func(nats.Header) error) error {
	cons, err := s.js.OrderedConsumer(ctx, s.stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter},
		DeliverPolicy: jetstream.DeliverAllPolicy, HeadersOnly: true})
	if err != nil {
		return classify(fmt.Errorf("reading stream %s: %w", s.stream, err))
	}
	var read uint64
	for read < total {
		batch, err := cons.Fetch(int(min(total-read, 1000)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return classify(fmt.Errorf("reading stream %s: %w", s.stream, err))
		}
		got := 0
		for m := range batch.Messages() {
			got++
			meta, err := m.Metadata()
			if err != nil {
				return fmt.Errorf("reading stream %s: %w", s.stream, err)
			}
			if meta.Sequence.Stream > last {
				return nil // published after the read began
			}
			read++
			if err := fn(m.Headers()); err != nil {
				return err
			}
			if meta.NumPending == 0 {
				return nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return classify(fmt.Errorf("reading stream %s: %w", s.stream, err))
		}
		if got == 0 {
			return sink.TransientError(fmt.Errorf("reading stream %s: %d of %d messages on %s arrived", s.stream, read, total, filter))
		}
	}
	return nil
}

// readStateInto reads the inventory's last state message into sh.
func (s *Sink) readStateInto(ctx context.Context, st jetstream.Stream, cluster, inventory string, sh *streamHeld) error {
	subject := s.stateSubject(cluster, inventory)
	if subject == "" {
		return nil
	}
	m, err := st.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	} else if err != nil {
		return classify(fmt.Errorf("reading the state of %s/%s from stream %s: %w", cluster, inventory, s.stream, err))
	}
	var rec stateRecord
	if m.Header.Get(hEvent) != evState || json.Unmarshal(m.Data, &rec) != nil {
		return nil
	}
	h := &sh.holding
	h.StateRecords++
	h.CoverageEntries = len(rec.Coverage)
	h.ChangedAt, h.ConfirmedAt, h.Writer = rec.ExportedAt.UTC(), rec.ConfirmedAt.UTC(), rec.Writer
	if sh.chunks {
		h.Rows = rec.Rows
	}
	return nil
}

// readKV lists the cluster's keys in the key-value bucket, if the sink has one. A key names
// its inventory by its bucket token only; one that matches no inventory read from the
// stream is attributed to that token.
func (s *Sink) readKV(ctx context.Context, cluster, inventory string, out map[string]*streamHeld, of func(string) *streamHeld) error {
	if s.bucket == "" {
		return nil
	}
	kv, err := s.js.KeyValue(ctx, s.bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	} else if err != nil {
		return classify(fmt.Errorf("opening key-value bucket %s: %w", s.bucket, err))
	}
	invToken := "*"
	if inventory != "" {
		invToken = kvToken(inventory)
	}
	lister, err := kv.ListKeysFiltered(ctx, kvToken(cluster)+"."+invToken+".>")
	if err != nil {
		return classify(fmt.Errorf("listing keys of bucket %s: %w", s.bucket, err))
	}
	byToken := map[string]string{}
	for inv := range out {
		byToken[kvToken(inv)] = inv
	}
	for key := range lister.Keys() {
		tok := strings.Split(key, ".")[1]
		inv, ok := byToken[tok]
		if !ok {
			inv = tok
		}
		sh := of(inv)
		sh.kvKeys = append(sh.kvKeys, key)
		sh.holding.Objects++
	}
	_ = lister.Stop()
	return nil
}

// list turns what readCluster found into sorted holdings.
func list(held map[string]*streamHeld) []sink.Holding {
	set := sink.HoldingSet{}
	for inv, sh := range held {
		*set.Of(inv) = sh.holding
	}
	return set.List()
}

// Holdings reports what the stream (and its key-value bucket) holds of the cluster: it reads
// the cluster's messages' headers (see readCluster) and writes nothing.
func (s *Sink) Holdings(ctx context.Context, cluster, inventory string) ([]sink.Holding, error) {
	ctx, stop := s.denied.watch(ctx)
	defer stop()
	held, err := s.holdings(ctx, cluster, inventory)
	return held, s.explain(ctx, err)
}

func (s *Sink) holdings(ctx context.Context, cluster, inventory string) ([]sink.Holding, error) {
	if cluster == "" {
		return nil, sink.Terminalf("nats sink stream %s: holdings of no cluster", s.stream)
	}
	held, _, err := s.readCluster(ctx, cluster, inventory)
	if err != nil {
		return nil, fmt.Errorf("nats sink: reading what stream %s holds of cluster %s: %w", s.stream, cluster, err)
	}
	return list(held), nil
}

// Purge removes the cluster's messages from the stream by subject, per inventory, and its
// keys from the key-value bucket (a purge marker per key, or a delete marker where the
// bucket allows no roll-ups, see kvRemover; a watcher sees either as the key's removal): the
// bucket first, then the stream, whose purge of an inventory's subjects (its state's
// included) is one request, bounded by the last sequence read, so a message published after
// the read stays. The cutoff is checked on the state messages read. A per-cluster user may
// not purge a shared stream (docs/sinks/nats.md): the stream's purge then fails, terminal.
func (s *Sink) Purge(ctx context.Context, cluster, inventory string, cutoff time.Time) ([]sink.Holding, error) {
	ctx, stop := s.denied.watch(ctx)
	defer stop()
	removed, err := s.purge(ctx, cluster, inventory, cutoff)
	return removed, s.explain(ctx, err)
}

func (s *Sink) purge(ctx context.Context, cluster, inventory string, cutoff time.Time) ([]sink.Holding, error) {
	if err := sink.OwnCluster("nats", "stream "+s.stream, s.cluster, cluster); err != nil {
		return nil, err
	}
	held, last, err := s.readCluster(ctx, cluster, inventory)
	if err != nil {
		return nil, fmt.Errorf("nats sink: reading what stream %s holds of cluster %s: %w", s.stream, cluster, err)
	}
	all := list(held)
	if late := sink.NotRetired(all, cutoff); len(late) > 0 {
		return nil, fmt.Errorf("nats sink stream %s: %w", s.stream, sink.NotRetiredError(cluster, late, cutoff))
	}
	st, err := s.js.Stream(ctx, s.stream)
	if err != nil {
		return nil, classify(fmt.Errorf("nats sink: looking up stream %s: %w", s.stream, s.disconnected(err)))
	}
	var kv jetstream.KeyValue
	var remove func(context.Context, string, ...jetstream.KVDeleteOpt) error
	removed := sink.HoldingSet{}
	for _, h := range all {
		sh := held[h.Inventory]
		if len(sh.kvKeys) > 0 && kv == nil {
			if kv, err = s.js.KeyValue(ctx, s.bucket); err != nil {
				return removed.List(), classify(fmt.Errorf("nats sink: opening key-value bucket %s: %w", s.bucket, err))
			}
			if remove, err = s.kvRemover(ctx, kv); err != nil {
				return removed.List(), err
			}
		}
		for _, key := range sh.kvKeys {
			if err := remove(ctx, key); err != nil {
				return removed.List(), classify(fmt.Errorf("nats sink: purging %s from bucket %s: %w", key, s.bucket, err))
			}
		}
		if h.StateRecords > 0 || h.Objects > len(sh.kvKeys) {
			filter, err := clusterFilter(s.template, cluster, h.Inventory)
			if err != nil {
				return removed.List(), err
			}
			if err := st.Purge(ctx, jetstream.WithPurgeSubject(filter), jetstream.WithPurgeSequence(last+1)); err != nil {
				return removed.List(), classify(fmt.Errorf("nats sink: purging %s from stream %s: %w", filter, s.stream, err))
			}
		}
		*removed.Of(h.Inventory) = h
	}
	s.mu.Lock()
	for _, h := range all {
		delete(s.states, cluster+"/"+h.Inventory)
		delete(s.held, cluster+"/"+h.Inventory)
		delete(s.sent, cluster+"/"+h.Inventory)
	}
	s.mu.Unlock()
	return removed.List(), nil
}

// kvRemover is how Purge removes a key from the bucket: a purge marker (a roll-up of the
// key's subject), or a delete marker when the bucket's stream does not allow roll-ups. A
// bucket shared by per-cluster users must not: a roll-up of "all" on any key the user may
// put removes every key of every cluster (docs/sinks/nats.md, "One writer per cluster").
// With one revision per key, as the sink creates buckets, both leave the marker alone.
func (s *Sink) kvRemover(ctx context.Context, kv jetstream.KeyValue) (func(context.Context, string, ...jetstream.KVDeleteOpt) error, error) {
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, classify(fmt.Errorf("nats sink: reading the status of key-value bucket %s: %w", s.bucket, err))
	}
	if b, ok := st.(*jetstream.KeyValueBucketStatus); ok && !b.StreamInfo().Config.AllowRollup {
		return kv.Delete, nil
	}
	return kv.Purge, nil
}

// OpenServers opens a handle onto stream (and bucket, if not "") for an operator's command
// (kollect sinks purge): the operator's network and options (credentials, TLS), no Secret,
// no egress guard. template is the sinks' subject template ("" for the default). It connects
// at once so that an unreachable server is the command's first error.
func OpenServers(ctx context.Context, servers, stream, bucket, template string, opts ...nats.Option) (*Sink, error) {
	denied := newDenials()
	nc, err := nats.Connect(servers, append([]nats.Option{nats.Name("kollect sinks purge"), nats.ErrorHandler(denied.handler)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", servers, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("JetStream on %s: %w", servers, err)
	}
	if _, err := js.Stream(ctx, stream); err != nil {
		nc.Close()
		return nil, fmt.Errorf("stream %s on %s: %w", stream, servers, err)
	}
	if template == "" {
		template = DefaultSubjectTemplate
	}
	return &Sink{servers: servers, stream: stream, template: template, bucket: bucket, timeout: time.Minute, nc: nc, js: js,
		dial: &lastError{}, denied: denied, buf: eventbuf.New(0), sent: map[string]string{}, held: map[string]*readBack{},
		states: map[string]heldState{}}, nil
}
