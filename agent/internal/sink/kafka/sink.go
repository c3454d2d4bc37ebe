package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/eventbuf"
	"kollect.dev/agent/internal/sink/sinktls"
	"kollect.dev/api/v1alpha1"
)

// Sink produces change events (or snapshot chunks) to one Kafka topic.
type Sink struct {
	topic      string // spec.kafka.topic with the cluster name in place of {cluster}
	partitions int32
	create     bool
	snapshot   bool
	brokers    []string
	cluster    string // the agent's (sink.Env), whose data alone Purge may remove
	opts       []kgo.Opt
	client     *kgo.Client
	admin      *kadm.Client
	buf        *eventbuf.Buffer
	log        logr.Logger
	// closedHint explains a connection the broker closed during the handshake.
	closedHint string

	mu       sync.Mutex
	ready    bool              // the topic exists (checked or created)
	maxBytes int               // the topic's max.message.bytes, 0 until read
	sent     map[string]string // snapshot mode: inventory → checksum delivered
	// flights maps an event key to the produce of its last event (see flight). Only send
	// uses it, and the buffer calls send under its lock.
	flights map[string]*flight
	// unanswered is set when an export gave up waiting for acknowledgements: the next one
	// hands franz-go no record before a broker answers (see reachable).
	unanswered atomic.Bool
	// held is, per inventory, the read-back of what consumers hold for batches without a
	// baseline, kept until an export succeeds (see baseline).
	held map[string]*readBack
	// verified is, per inventory, set once the sink knows that no record of it was produced
	// after its latest state record by another process (see quietSince).
	verified map[string]bool
	// states is, per inventory, the state record the sink last wrote or read in the topic
	// (see Confirm).
	states map[string]*heldState
}

var _ sink.Sink = (*Sink)(nil)

// New is the kafka backend's entry in the sink table: it builds the sink from a
// KollectEventSink of type kafka.
func New(ctx context.Context, obj sink.Object, env sink.Env) (sink.Sink, error) {
	spec, err := sink.EventSpec(obj)
	if err != nil {
		return nil, err
	}
	s, err := open(ctx, spec, env)
	if err != nil {
		return nil, err // never a nil *Sink in a non-nil interface
	}
	return s, nil
}

// open builds the sink; it reads credentials but does not connect (Probe does).
func open(ctx context.Context, spec *v1alpha1.KollectEventSinkSpec, env sink.Env) (*Sink, error) {
	if spec.Type != v1alpha1.EventSinkKafka || spec.Kafka == nil {
		return nil, sink.Terminalf("kafka sink %s/%s: spec.kafka is not set", env.Namespace, env.Name)
	}
	cfg := spec.Kafka
	topic, err := Topic(cfg.Topic, env.Cluster)
	if err != nil {
		return nil, fmt.Errorf("kafka sink %s/%s: %w", env.Namespace, env.Name, err)
	}
	opts, err := clientOptions(ctx, spec, topic, env)
	if err != nil {
		return nil, fmt.Errorf("kafka sink %s/%s: %w", env.Namespace, env.Name, err)
	}
	client, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, sink.Terminalf("kafka sink %s/%s: %w", env.Namespace, env.Name, err)
	}
	partitions := cfg.Partitions
	if partitions <= 0 {
		partitions = 3
	}
	return &Sink{
		topic: topic, partitions: partitions, create: cfg.CreateTopic,
		snapshot: spec.Mode == v1alpha1.EventModeSnapshot, brokers: cfg.Brokers, cluster: env.Cluster,
		opts: opts, client: client, admin: kadm.NewClient(client), buf: eventbuf.New(int(spec.BufferSize)),
		log: env.Log, sent: map[string]string{}, held: map[string]*readBack{}, verified: map[string]bool{}, states: map[string]*heldState{},
		flights:    map[string]*flight{},
		closedHint: closedHint(cfg),
	}, nil
}

// clientOptions maps the spec onto franz-go: idempotent producer with acks from all in-sync
// replicas (franz-go's default, stated for clarity), compression, SASL and TLS. topic is
// spec.kafka.topic expanded (see Topic).
func clientOptions(ctx context.Context, spec *v1alpha1.KollectEventSinkSpec, topic string, env sink.Env) ([]kgo.Opt, error) {
	cfg := spec.Kafka
	codec, err := compression(cfg.Compression)
	if err != nil {
		return nil, err
	}
	timeout := spec.Timeout.Duration
	if timeout <= 0 {
		timeout = time.Minute
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(codec),
		kgo.ClientID("kollect-agent"),
		// Records not delivered within an export's timeout fail by themselves: a record of an
		// abandoned export must not linger in the client for ever while its event is owed
		// (and re-produced) by later exports.
		kgo.RecordDeliveryTimeout(timeout),
		kgo.ProducerLinger(5 * time.Millisecond),
	}
	tlsCfg, err := sinktls.Config(ctx, cfg.TLS, env.Secrets)
	if err != nil {
		return nil, err
	}
	guard := env.Guard()
	for _, b := range cfg.Brokers {
		if err := guard.CheckHostPort(b); err != nil {
			return nil, sink.TerminalError(err)
		}
	}
	opts = append(opts, kgo.Dialer(guard.TLSDialer(tlsCfg)))
	if cfg.SASLMechanism != "" {
		mech, err := saslMechanism(ctx, cfg, env.Secrets)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(mech))
	}
	return opts, nil
}

func compression(name string) (kgo.CompressionCodec, error) {
	switch name {
	case "", "zstd":
		return kgo.ZstdCompression(), nil
	case "none":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	}
	return kgo.CompressionCodec{}, sink.Terminalf("unknown compression %q", name)
}

// saslMechanism reads username and password from the secretRef.
func saslMechanism(ctx context.Context, cfg *v1alpha1.KafkaSinkConfig, secrets sink.SecretGetter) (sasl.Mechanism, error) {
	if cfg.SecretRef == nil {
		return nil, sink.Terminalf("saslMechanism %s needs a secretRef with username and password", cfg.SASLMechanism)
	}
	data, err := secrets(ctx, cfg.SecretRef.Name)
	if err != nil {
		return nil, fmt.Errorf("reading secret %s: %w", cfg.SecretRef.Name, err)
	}
	user, pass := string(data["username"]), string(data["password"])
	if user == "" {
		return nil, sink.Terminalf("secret %s has no username", cfg.SecretRef.Name)
	}
	switch cfg.SASLMechanism {
	case "PLAIN":
		return plain.Auth{User: user, Pass: pass}.AsMechanism(), nil
	case "SCRAM-SHA-256":
		return scram.Auth{User: user, Pass: pass}.AsSha256Mechanism(), nil
	case "SCRAM-SHA-512":
		return scram.Auth{User: user, Pass: pass}.AsSha512Mechanism(), nil
	}
	return nil, sink.Terminalf("unsupported saslMechanism %q", cfg.SASLMechanism)
}

// Export delivers the batch's change events (or the snapshot in snapshot mode), then the
// inventory's state record, with the batch's coverage, when it changes (see Confirm). A batch
// whose only change is the coverage produces the state record alone (see coverageOnly). It
// returns nil once the broker acknowledged every owed event and the state record; on failure
// the events stay owed and the delivery worker's retry, or the next batch, delivers them.
// Before anything is buffered the state record's writer is checked (see writers.go): another
// live instance's state refuses the batch with a *sink.WriterConflictError, and a success on
// a state another instance tried to write returns a *sink.ContendedError.
func (s *Sink) Export(ctx context.Context, b *sink.Batch) error {
	if err := s.ensureTopic(ctx); err != nil {
		return err
	}
	check, err := s.checkExport(ctx, b)
	if err != nil {
		return err
	}
	if err := s.export(ctx, b); err != nil {
		return err
	}
	return check.Contention()
}

// export is Export once the writer may write.
func (s *Sink) export(ctx context.Context, b *sink.Batch) error {
	if done, err := s.coverageOnly(ctx, b); done || err != nil {
		return err
	}
	if s.snapshot {
		if err := s.exportSnapshot(ctx, b); err != nil {
			return err
		}
		return s.recordExport(ctx, b)
	}
	if b.Diff.Full {
		// No baseline: the topic tells what consumers hold, and the batch becomes the
		// change from it (rows deleted meanwhile get a delete event and a tombstone).
		var err error
		if b, err = s.baseline(ctx, b); err != nil {
			return err
		}
	}
	if err := s.buf.Export(ctx, b, s.send); err != nil {
		return err
	}
	if err := s.recordExport(ctx, b); err != nil {
		return err
	}
	s.settle(b.Envelope.Cluster, b.Envelope.Inventory)
	return nil
}

// BufferStats returns the pending-event metrics (gauge Pending, counters Overflows, Resyncs,
// Delivered).
func (s *Sink) BufferStats() eventbuf.Stats { return s.buf.Stats() }

// ensureTopic checks once that the topic exists, creating it compacted when allowed.
func (s *Sink) ensureTopic(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ready {
		return nil
	}
	details, err := s.admin.ListTopics(ctx, s.topic)
	if err != nil {
		return classify(fmt.Errorf("listing topic %s: %w%s", s.topic, err, aclHint(err)))
	}
	if d, ok := details[s.topic]; ok && d.Err == nil {
		s.ready = true
		return nil
	} else if ok && !errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
		return classify(fmt.Errorf("topic %s: %w%s", s.topic, d.Err, aclHint(d.Err)))
	}
	if !s.create {
		return sink.Terminalf("topic %s does not exist and createTopic is false", s.topic)
	}
	compact := "compact"
	_, err = s.admin.CreateTopic(ctx, s.partitions, -1, map[string]*string{"cleanup.policy": &compact}, s.topic)
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return classify(fmt.Errorf("creating topic %s: %w", s.topic, err))
	}
	s.ready = true
	return nil
}

// Probe checks that the brokers answer with these credentials, that the topic exists or
// may be created, and, where the broker tells, that the credentials may write it. It writes
// nothing.
func (s *Sink) Probe(ctx context.Context) error {
	if err := s.client.Ping(ctx); err != nil {
		return classify(fmt.Errorf("connecting to %s: %w%s", strings.Join(s.brokers, ","), err, s.hintFor(err)))
	}
	details, err := s.admin.ListTopics(ctx, s.topic)
	if err != nil {
		return classify(fmt.Errorf("listing topic %s: %w%s", s.topic, err, aclHint(err)))
	}
	if d, ok := details[s.topic]; ok && d.Err == nil {
		return s.checkWrite(ctx)
	} else if ok && !errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
		return classify(fmt.Errorf("topic %s: %w%s", s.topic, d.Err, aclHint(d.Err)))
	}
	if !s.create {
		return sink.Terminalf("topic %s does not exist and createTopic is false", s.topic)
	}
	return nil
}

// Preview describes the records an export produces: the topic, a sample key and headers.
func (s *Sink) Preview(_ context.Context, cluster, inventory string) (sink.Preview, error) {
	p := sink.Preview{
		Destination: fmt.Sprintf("kafka topic %s on %s", s.topic, strings.Join(s.brokers, ",")),
		Paths:       []string{s.topic},
	}
	state := fmt.Sprintf("; and the inventory's state record (checksum, rows, exportedAt, confirmedAt, writer, coverage), key %s, header %s=%s",
		stateKey(cluster, inventory), hEvent, evState)
	if s.snapshot {
		p.Message = fmt.Sprintf("snapshot chunks, key %s, headers %s=%s %s=%s %s=snapshot %s=true %s=<checksum> %s=<i>/<n>",
			snapshotKey(cluster, inventory, 0), hSchema, export.SchemaVersion, hCluster, cluster, hEvent, hResync, hChecksum, hChunk) + state
		return p, nil
	}
	sample := export.Key{Cluster: cluster, Inventory: inventory, Target: "<target>", UID: "<uid>"}
	p.Message = fmt.Sprintf("one record per changed row, key %s, headers %s=%s %s=%s %s=%s %s=upsert|delete [%s=true]; "+
		"a delete is followed by a tombstone (null value) with the same key",
		sample, hSchema, export.SchemaVersion, hCluster, cluster, hInventory, inventory, hEvent, hResync) + state
	return p, nil
}

// Close flushes nothing (the next process reads back what the topic holds and sends what
// consumers lack) and closes the connections.
func (s *Sink) Close() error {
	s.client.Close()
	return nil
}

// classify marks broker errors that retrying cannot fix as terminal.
func classify(err error) error {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		switch ke {
		case kerr.SaslAuthenticationFailed, kerr.UnsupportedSaslMechanism, kerr.IllegalSaslState,
			kerr.TopicAuthorizationFailed, kerr.ClusterAuthorizationFailed, kerr.InvalidTopicException,
			kerr.PolicyViolation, kerr.InvalidConfig, kerr.InvalidReplicationFactor, kerr.InvalidPartitions:
			return sink.TerminalError(err)
		}
		return sink.TransientError(err)
	}
	if sinktls.IsVerificationError(err) {
		return sink.TerminalError(err)
	}
	return sink.TransientError(err)
}

var _ eventbuf.Reporter = (*Sink)(nil)
