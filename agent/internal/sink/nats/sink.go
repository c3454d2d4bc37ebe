package nats

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/egress"
	"kollect.dev/agent/internal/sink/eventbuf"
	"kollect.dev/agent/internal/sink/sinktls"
	"kollect.dev/api/v1alpha1"
)

// DefaultSubjectTemplate is used when the spec leaves subjectTemplate empty.
const DefaultSubjectTemplate = "kollect.{cluster}.{inventory}.{kind}"

// maxInFlight bounds unacknowledged publishes: enough to keep the connection busy, few enough
// that an outage does not pile up client memory.
const maxInFlight = 2048

// Sink publishes change events (or snapshot chunks) to a JetStream stream.
type Sink struct {
	servers  string
	stream   string
	template string
	bucket   string
	cluster  string // the agent's (sink.Env), whose data alone Purge may remove
	create   bool
	snapshot bool
	timeout  time.Duration
	nc       *nats.Conn
	js       jetstream.JetStream
	buf      *eventbuf.Buffer
	log      logr.Logger
	// dial is the latest failed connection attempt, which nc.LastError does not keep.
	dial *lastError
	// denied ends operations the server refused a subject of (see denied.go).
	denied *denials

	mu    sync.Mutex
	ready bool              // stream (and bucket) exist
	sent  map[string]string // snapshot mode: inventory → checksum delivered
	// held is, per inventory, the read-back of what consumers hold for batches without a
	// baseline, kept until an export succeeds (see baseline).
	held map[string]*readBack
	// states is, per inventory, the state message this sink last published or read (see
	// Confirm and writers.go).
	states map[string]heldState
}

var _ sink.Sink = (*Sink)(nil)

// New is the nats backend's entry in the sink table: it builds the sink from a
// KollectEventSink of type nats.
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

// open builds the sink. The connection is established in the background and re-established
// after outages, so New does not fail on an unreachable server (Probe reports it).
func open(ctx context.Context, spec *v1alpha1.KollectEventSinkSpec, env sink.Env) (*Sink, error) {
	if spec.Type != v1alpha1.EventSinkNATS || spec.NATS == nil {
		return nil, sink.Terminalf("nats sink %s/%s: spec.nats is not set", env.Namespace, env.Name)
	}
	cfg := spec.NATS
	timeout := spec.Timeout.Duration
	if timeout <= 0 {
		timeout = time.Minute
	}
	opts, err := connectOptions(ctx, cfg, env)
	if err != nil {
		return nil, fmt.Errorf("nats sink %s/%s: %w", env.Namespace, env.Name, err)
	}
	dial, denied := &lastError{}, newDenials()
	opts = append(opts, nats.ReconnectErrHandler(func(_ *nats.Conn, err error) { dial.set(err) }), nats.ErrorHandler(denied.handler))
	servers := strings.Join(cfg.Servers, ",")
	nc, err := nats.Connect(servers, opts...)
	if err != nil {
		return nil, classify(fmt.Errorf("nats sink %s/%s: connecting to %s: %w", env.Namespace, env.Name, servers, err))
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(2*maxInFlight),
		jetstream.WithPublishAsyncTimeout(timeout))
	if err != nil {
		nc.Close()
		return nil, sink.Terminalf("nats sink %s/%s: %w", env.Namespace, env.Name, err)
	}
	s := &Sink{servers: servers, stream: cfg.Stream, template: cfg.SubjectTemplate, bucket: cfg.KVBucket, cluster: env.Cluster,
		create: cfg.CreateStream, snapshot: spec.Mode == v1alpha1.EventModeSnapshot, timeout: timeout,
		nc: nc, js: js, dial: dial, denied: denied, buf: eventbuf.New(int(spec.BufferSize)), log: env.Log, sent: map[string]string{},
		held: map[string]*readBack{}, states: map[string]heldState{}}
	if s.stream == "" {
		s.stream = "KOLLECT"
	}
	if s.template == "" {
		s.template = DefaultSubjectTemplate
	}
	return s, nil
}

// connectOptions maps TLS and the secretRef (user and password, token, nkey seed, or creds)
// onto nats.go options.
func connectOptions(ctx context.Context, cfg *v1alpha1.NATSSinkConfig, env sink.Env) ([]nats.Option, error) {
	guard := env.Guard()
	for _, server := range cfg.Servers {
		if !strings.Contains(server, "://") {
			server = "nats://" + server
		}
		if err := guard.CheckURL(server); err != nil {
			return nil, sink.TerminalError(err)
		}
	}
	opts := []nats.Option{
		nats.Name("kollect-agent " + env.Cluster + " " + env.Namespace + "/" + env.Name),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		// Publishes made while disconnected are not buffered by the client: they fail, stay
		// owed in the sink's own bounded buffer, and are re-published after reconnection.
		nats.ReconnectBufSize(-1),
		nats.SetCustomDialer(guard),
	}
	tlsCfg, err := sinktls.Config(ctx, cfg.TLS, env.Secrets)
	if err != nil {
		return nil, err
	}
	if tlsCfg != nil {
		opts = append(opts, nats.Secure(tlsCfg))
	}
	if cfg.SecretRef == nil {
		return opts, nil
	}
	data, err := env.Secrets(ctx, cfg.SecretRef.Name)
	if err != nil {
		return nil, fmt.Errorf("reading secret %s: %w", cfg.SecretRef.Name, err)
	}
	switch {
	case len(data["creds"]) > 0:
		jwt, err := nkeys.ParseDecoratedJWT(data["creds"])
		if err != nil {
			return nil, sink.Terminalf("secret %s key creds: %w", cfg.SecretRef.Name, err)
		}
		kp, err := nkeys.ParseDecoratedUserNKey(data["creds"])
		if err != nil {
			return nil, sink.Terminalf("secret %s key creds: %w", cfg.SecretRef.Name, err)
		}
		seed, err := kp.Seed()
		if err != nil {
			return nil, sink.Terminalf("secret %s key creds: %w", cfg.SecretRef.Name, err)
		}
		opts = append(opts, nats.UserJWTAndSeed(jwt, string(seed)))
	case len(data["nkey"]) > 0:
		kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(data["nkey"]))))
		if err != nil {
			return nil, sink.Terminalf("secret %s key nkey is not an nkey seed: %w", cfg.SecretRef.Name, err)
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return nil, sink.Terminalf("secret %s key nkey: %w", cfg.SecretRef.Name, err)
		}
		opts = append(opts, nats.Nkey(pub, kp.Sign))
	case len(data["token"]) > 0:
		opts = append(opts, nats.Token(string(data["token"])))
	case len(data["user"]) > 0:
		opts = append(opts, nats.UserInfo(string(data["user"]), string(data["password"])))
	default:
		return nil, sink.Terminalf("secret %s holds none of creds, nkey, token, user", cfg.SecretRef.Name)
	}
	return opts, nil
}

// Export delivers the batch's change events (or the snapshot in snapshot mode), then the
// inventory's state message, with the batch's coverage, when it changes (see Confirm). A
// batch whose only change is the coverage publishes the state message alone (see
// coverageOnly). It returns nil once the stream acknowledged every owed event and the state
// message. Before anything is buffered the state's writer is checked (see writers.go):
// another live instance's state refuses the batch with a *sink.WriterConflictError, and a
// success on a state another instance tried to write returns a *sink.ContendedError.
func (s *Sink) Export(ctx context.Context, b *sink.Batch) error {
	ctx, stop := s.denied.watch(ctx)
	defer stop()
	return s.explain(ctx, s.exportChecked(ctx, b))
}

// exportChecked is Export: the writer check, then the export.
func (s *Sink) exportChecked(ctx context.Context, b *sink.Batch) error {
	if err := s.ensureStream(ctx); err != nil {
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
		// No baseline: the stream (or the bucket) tells what consumers hold, and the batch
		// becomes the change from it (rows deleted meanwhile get a delete event).
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

// ensureStream checks once that the stream (and the bucket) exist, creating them when allowed.
func (s *Sink) ensureStream(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ready {
		return nil
	}
	if _, err := s.js.Stream(ctx, s.stream); errors.Is(err, jetstream.ErrStreamNotFound) {
		if !s.create {
			return sink.Terminalf("stream %s does not exist and createStream is false", s.stream)
		}
		_, err = s.js.CreateStream(ctx, jetstream.StreamConfig{Name: s.stream, Subjects: []string{streamSubjects(s.template)},
			Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute,
			Description: "Kollect change events"})
		if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return classify(fmt.Errorf("creating stream %s: %w", s.stream, err))
		}
	} else if err != nil {
		return classify(fmt.Errorf("looking up stream %s: %w", s.stream, err))
	}
	if s.bucket != "" {
		if _, err := s.js.KeyValue(ctx, s.bucket); errors.Is(err, jetstream.ErrBucketNotFound) {
			if !s.create {
				return sink.Terminalf("key-value bucket %s does not exist and createStream is false", s.bucket)
			}
			_, err = s.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: s.bucket, History: 1,
				Storage: jetstream.FileStorage, Description: "Kollect: latest row per key"})
			if err != nil {
				return classify(fmt.Errorf("creating key-value bucket %s: %w", s.bucket, err))
			}
		} else if err != nil {
			return classify(fmt.Errorf("looking up key-value bucket %s: %w", s.bucket, err))
		}
	}
	s.ready = true
	return nil
}

// disconnected explains a publish refused while the client is not connected by the last
// reason its reconnect attempts failed ("connection refused", a TLS or auth error).
func (s *Sink) disconnected(err error) error {
	if s.nc.IsConnected() {
		return err
	}
	if dialErr := s.dial.get(); dialErr != nil {
		return fmt.Errorf("not connected to %s: %w (%v)", s.servers, dialErr, err)
	}
	return fmt.Errorf("not connected to %s: %w", s.servers, err)
}

// Probe checks that the server answers with these credentials, JetStream is enabled and the
// stream (and bucket) exist or may be created. It writes nothing.
func (s *Sink) Probe(ctx context.Context) error {
	ctx, stop := s.denied.watch(ctx)
	defer stop()
	return s.explain(ctx, s.probe(ctx))
}

func (s *Sink) probe(ctx context.Context) error {
	for !s.nc.IsConnected() {
		if err := s.connectError(); err != nil && (isAuth(err) || sinktls.IsVerificationError(err) || egress.IsRefused(err)) {
			// Retrying in the background cannot fix credentials, certificates or egress rules.
			return sink.TerminalError(fmt.Errorf("connecting to %s: %w", s.servers, err))
		}
		select {
		case <-ctx.Done():
			err := s.connectError()
			if err == nil {
				err = ctx.Err()
			}
			return classify(fmt.Errorf("connecting to %s: %w", s.servers, err))
		case <-time.After(50 * time.Millisecond):
		}
	}
	if _, err := s.js.AccountInfo(ctx); err != nil {
		return classify(fmt.Errorf("JetStream account info on %s: %w", s.servers, err))
	}
	if _, err := s.js.Stream(ctx, s.stream); errors.Is(err, jetstream.ErrStreamNotFound) && !s.create {
		return sink.Terminalf("stream %s does not exist and createStream is false", s.stream)
	} else if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return classify(fmt.Errorf("looking up stream %s: %w", s.stream, err))
	}
	if s.bucket != "" {
		if _, err := s.js.KeyValue(ctx, s.bucket); errors.Is(err, jetstream.ErrBucketNotFound) && !s.create {
			return sink.Terminalf("key-value bucket %s does not exist and createStream is false", s.bucket)
		} else if err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
			return classify(fmt.Errorf("looking up key-value bucket %s: %w", s.bucket, err))
		}
	}
	return nil
}

// Preview describes the messages an export publishes: subject, a sample key and headers.
func (s *Sink) Preview(_ context.Context, cluster, inventory string) (sink.Preview, error) {
	// {kind} stays a placeholder: one subject per kind of the inventory's targets.
	subject := strings.NewReplacer("{cluster}", token(cluster), "{inventory}", token(inventory)).Replace(s.template)
	p := sink.Preview{Destination: fmt.Sprintf("nats stream %s on %s", s.stream, s.servers), Paths: []string{subject}}
	if s.snapshot {
		subject = Subject(s.template, cluster, inventory, snapshotKind)
		p.Paths = []string{subject}
		p.Message = fmt.Sprintf("snapshot chunks on %s, headers %s=snapshot %s=<checksum> %s=<i>/<n>, Nats-Msg-Id checksum:chunk",
			subject, hEvent, hChecksum, hChunk)
		if state := s.stateSubject(cluster, inventory); state != "" {
			p.Message += fmt.Sprintf("; the inventory's state (checksum, rows, exportedAt, confirmedAt, writer, coverage) on %s, header %s=%s", state, hEvent, evState)
		}
		return p, nil
	}
	sample := export.Key{Cluster: cluster, Inventory: inventory, Target: "<target>", UID: "<uid>"}
	p.Message = fmt.Sprintf("one message per changed row on %s, headers %s=%s %s=%s %s=%s %s=upsert|delete %s=%s [%s=true], "+
		"Nats-Msg-Id sha256(key, row digest, event type, batch time)", subject, hSchema, export.SchemaVersion,
		hCluster, cluster, hInventory, inventory, hEvent, hKey, sample, hResync)
	if state := s.stateSubject(cluster, inventory); state != "" {
		p.Message += fmt.Sprintf("; the inventory's state (checksum, rows, exportedAt, confirmedAt, writer, coverage) on %s, header %s=%s", state, hEvent, evState)
	}
	if s.bucket != "" {
		p.Paths = append(p.Paths, "kv:"+s.bucket+"/"+kvKey(sample))
		p.Message += fmt.Sprintf("; key-value bucket %s holds the latest row under %s", s.bucket, kvKey(sample))
	}
	return p, nil
}

// Close drains nothing (the next process reads back what the stream or the bucket holds and
// sends what consumers lack) and closes the connection.
func (s *Sink) Close() error {
	s.nc.Close()
	return nil
}

func isAuth(err error) bool {
	return errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) ||
		errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, nats.ErrAccountAuthExpired) ||
		strings.Contains(strings.ToLower(err.Error()), "authorization violation")
}

// classify marks errors that retrying cannot fix (credentials, their permissions,
// certificates) as terminal.
func classify(err error) error {
	if isAuth(err) || errors.Is(err, nats.ErrPermissionViolation) || sinktls.IsVerificationError(err) {
		return sink.TerminalError(err)
	}
	return sink.TransientError(err)
}

var _ eventbuf.Reporter = (*Sink)(nil)
