package kafka

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/eventbuf"
)

var _ sink.Purger = (*Sink)(nil)

// evPurge is the kollect-event header of the tombstones a purge produces.
const evPurge = "purge"

// maxPurgeRecords bounds the topic a purge reads: beyond it (a large topic shared by many
// clusters) a purge is refused, terminal, rather than reading for minutes.
const maxPurgeRecords = 5_000_000

// keyHeld is the latest record of one key of the cluster in the topic.
type keyHeld struct {
	inventory string
	partition int32
	event     string
	value     []byte
}

// readCluster reads the whole topic, from each partition's start to the end offset listed
// when it began, and returns the latest record of every key whose kollect-cluster header
// names cluster (and whose kollect-inventory header names inventory, unless ""): the headers,
// not the key, because cluster and inventory names may hold the key's separator '/'. A topic
// holding more than maxPurgeRecords records between its start and end offsets is refused,
// since what it holds of the cluster cannot be told without reading all of it.
func (s *Sink) readCluster(ctx context.Context, cluster, inventory string) (map[string]*keyHeld, error) {
	from, until, total, err := s.topicRange(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]*keyHeld{}
	if total > maxPurgeRecords {
		return nil, sink.Terminalf("topic %s holds %d records, more than the %d a purge reads: compact it or purge with a consumer of your own",
			s.topic, total, maxPurgeRecords)
	}
	err = s.scan(ctx, from, until, func(r *kgo.Record) bool {
		c, inv, ev := header(r, hCluster), header(r, hInventory), header(r, hEvent)
		if c == cluster && (inventory == "" || inv == inventory) {
			out[string(r.Key)] = &keyHeld{inventory: inv, partition: r.Partition, event: ev, value: r.Value}
		}
		return true
	})
	if err != nil {
		return nil, classify(fmt.Errorf("reading %s: %w", s.topic, err))
	}
	return out, nil
}

// header returns the value of the record's header key, "" without one.
func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// holdingsOf turns the keys read into holdings: a row counts when its latest record is an
// upsert, a key (row or snapshot chunk) is an object when its latest record has a value (it
// gets a tombstone), the state key gives the state's times, writer and coverage.
func holdingsOf(cluster string, keys map[string]*keyHeld) []sink.Holding {
	set := sink.HoldingSet{}
	chunks := map[string]bool{}
	for key, k := range keys {
		h := set.Of(k.inventory)
		switch {
		case key == stateKey(cluster, k.inventory):
			var rec stateRecord
			if len(k.value) == 0 || json.Unmarshal(k.value, &rec) != nil {
				continue
			}
			h.StateRecords++
			h.CoverageEntries = len(rec.Coverage)
			h.ChangedAt, h.ConfirmedAt, h.Writer = rec.ExportedAt.UTC(), rec.ConfirmedAt.UTC(), rec.Writer
		case len(k.value) == 0:
		case k.event == "snapshot":
			h.Objects++
			chunks[k.inventory] = true
		default:
			h.Objects++
			if k.event != string(export.ChangeDelete) {
				h.Rows++
			}
		}
	}
	// A snapshot-mode inventory's rows are in its chunks: the state record tells how many.
	for inv := range chunks {
		if st, ok := keys[stateKey(cluster, inv)]; ok {
			var rec stateRecord
			if json.Unmarshal(st.value, &rec) == nil {
				set.Of(inv).Rows = rec.Rows
			}
		}
	}
	var out []sink.Holding
	for _, h := range set.List() {
		if h.Objects > 0 || h.StateRecords > 0 {
			out = append(out, h)
		}
	}
	return out
}

// Holdings reports what the topic holds of the cluster: it reads the topic (see readCluster)
// and writes nothing.
func (s *Sink) Holdings(ctx context.Context, cluster, inventory string) ([]sink.Holding, error) {
	if cluster == "" {
		return nil, sink.Terminalf("kafka sink topic %s: holdings of no cluster", s.topic)
	}
	keys, err := s.readCluster(ctx, cluster, inventory)
	if err != nil {
		return nil, fmt.Errorf("kafka sink: reading what topic %s holds of cluster %s: %w", s.topic, cluster, err)
	}
	return holdingsOf(cluster, keys), nil
}

// Purge produces a tombstone (a record with a null value, kollect-event purge) for every key of
// the cluster whose latest record holds a value: rows, snapshot chunks and, last, after every
// other tombstone was acknowledged, the state record. Each goes to the partition its key's
// records are in, so a compacted topic drops the key and a consumer reading the compacted
// topic no longer sees the cluster. The cutoff is checked on the state records as read; an
// agent producing meanwhile writes after the tombstones and is seen again, which is why the
// cutoff's default keeps a live agent out.
func (s *Sink) Purge(ctx context.Context, cluster, inventory string, cutoff time.Time) ([]sink.Holding, error) {
	if err := sink.OwnCluster("kafka", "topic "+s.topic, s.cluster, cluster); err != nil {
		return nil, err
	}
	keys, err := s.readCluster(ctx, cluster, inventory)
	if err != nil {
		return nil, fmt.Errorf("kafka sink: reading what topic %s holds of cluster %s: %w", s.topic, cluster, err)
	}
	held := holdingsOf(cluster, keys)
	if late := sink.NotRetired(held, cutoff); len(late) > 0 {
		return nil, fmt.Errorf("kafka sink topic %s: %w", s.topic, sink.NotRetiredError(cluster, late, cutoff))
	}
	var rows, states []*kgo.Record
	for key, k := range keys {
		if len(k.value) == 0 {
			continue
		}
		r := &kgo.Record{Key: []byte(key), Partition: k.partition, Headers: []kgo.RecordHeader{
			{Key: hSchema, Value: []byte(export.SchemaVersion)},
			{Key: hCluster, Value: []byte(cluster)},
			{Key: hInventory, Value: []byte(k.inventory)},
			{Key: hEvent, Value: []byte(evPurge)},
		}}
		if key == stateKey(cluster, k.inventory) {
			states = append(states, r)
		} else {
			rows = append(rows, r)
		}
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), s.opts...), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		return nil, sink.TerminalError(fmt.Errorf("kafka sink: producer for %s: %w", s.topic, err))
	}
	defer cl.Close()
	for _, batch := range [][]*kgo.Record{rows, states} {
		if err := cl.ProduceSync(ctx, batch...).FirstErr(); err != nil {
			return nil, classify(fmt.Errorf("kafka sink: producing %d tombstones of cluster %s to %s: %w", len(batch), cluster, s.topic, err))
		}
	}
	s.mu.Lock()
	for _, h := range held {
		delete(s.states, cluster+"/"+h.Inventory)
		delete(s.held, cluster+"/"+h.Inventory)
		delete(s.verified, cluster+"/"+h.Inventory)
		delete(s.sent, cluster+"/"+h.Inventory)
	}
	s.mu.Unlock()
	return held, nil
}

// Auth is an operator's SASL login for OpenBrokers; Mechanism "" is none.
type Auth struct {
	Mechanism, User, Password string
}

// OpenBrokers opens a handle onto topic for an operator's command (kollect sinks purge): the
// operator's network and login, no Secret, no egress guard; it pings the brokers so that an
// unreachable cluster is the command's first error. tlsCfg nil is plaintext. topic is a
// name, not a template: the caller expands {cluster} (Topic) with the cluster it purges.
func OpenBrokers(ctx context.Context, brokers []string, topic string, auth Auth, tlsCfg *tls.Config) (*Sink, error) {
	if _, err := Topic(topic, ""); err != nil {
		return nil, err
	}
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic), kgo.ClientID("kollect-sinks-purge"),
		kgo.RequiredAcks(kgo.AllISRAcks())}
	if tlsCfg != nil {
		opts = append(opts, kgo.DialTLSConfig(tlsCfg))
	}
	if auth.Mechanism != "" {
		mech, err := loginMechanism(auth)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(mech))
	}
	client, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	if err := client.Ping(ctx); err != nil {
		client.Close()
		return nil, fmt.Errorf("connecting to %s: %w", strings.Join(brokers, ","), err)
	}
	admin := kadm.NewClient(client)
	details, err := admin.ListTopics(ctx, topic)
	if err == nil {
		err = details.Error()
	}
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("topic %s on %s: %w", topic, strings.Join(brokers, ","), err)
	}
	return &Sink{topic: topic, brokers: brokers, opts: opts, client: client, admin: admin, buf: eventbuf.New(0),
		log: logr.Discard(), sent: map[string]string{}, held: map[string]*readBack{}, verified: map[string]bool{},
		states: map[string]*heldState{}, flights: map[string]*flight{}}, nil
}

// loginMechanism maps an operator's Auth onto franz-go, as saslMechanism does a Secret.
func loginMechanism(a Auth) (sasl.Mechanism, error) {
	switch a.Mechanism {
	case "PLAIN":
		return plain.Auth{User: a.User, Pass: a.Password}.AsMechanism(), nil
	case "SCRAM-SHA-256":
		return scram.Auth{User: a.User, Pass: a.Password}.AsSha256Mechanism(), nil
	case "SCRAM-SHA-512":
		return scram.Auth{User: a.User, Pass: a.Password}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("unsupported SASL mechanism %q (want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)", a.Mechanism)
}
