package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"kollect.dev/hub/internal/assign"
	"kollect.dev/hub/internal/auth"
	"kollect.dev/hub/internal/bundle"
	"kollect.dev/hub/internal/dispatch"
	"kollect.dev/hub/internal/fleet"
	"kollect.dev/hub/internal/health"
	"kollect.dev/hub/internal/pki"
	"kollect.dev/hub/internal/ratelimit"
	"kollect.dev/hub/internal/rollout"
	"kollect.dev/hub/internal/store"
	"kollect.dev/hub/internal/store/sqlstore"
	"kollect.dev/hub/internal/webui"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"
)

// Config configures a hub.
type Config struct {
	// DataDir holds the SQLite database, the generated CA and certificates and the first
	// admin token.
	DataDir string
	// StoreDSN is a postgres:// URL for several replicas; empty means SQLite in DataDir.
	StoreDSN string
	// TLSCert and TLSKey bring a certificate; empty means the hub's own CA in DataDir.
	TLSCert, TLSKey string
	// Hosts are the DNS names and IPs the generated serving certificate is valid for.
	Hosts []string
	// Thresholds turn heartbeat age into stale and offline.
	Thresholds health.Thresholds
	// HeartbeatInterval is what agents are told to use.
	HeartbeatInterval time.Duration
	// PollInterval is how often the hub looks for changes made by other replicas.
	PollInterval time.Duration
	// FleetInterval is how often WatchFleet subscribers get state changes.
	FleetInterval time.Duration
	// CredentialRecheck is how often the open WatchConfig streams' credentials are checked,
	// to end streams revoked or replaced through another replica (this replica ends them at
	// once).
	CredentialRecheck time.Duration
	// RolloutInterval is how often the rollout engine re-evaluates active rollouts when no
	// heartbeat wakes it sooner.
	RolloutInterval time.Duration
	// RegisterLimit bounds registrations per client address; AuthFailureLimit bounds failed
	// authentications per client address, after which the address's calls are refused until
	// its budget refills. Zero values take DefaultRegisterLimit and DefaultAuthFailureLimit;
	// a negative Burst disables the limit.
	RegisterLimit, AuthFailureLimit ratelimit.Limit
	// BootstrapMaxTTL and BootstrapMaxUses are the most a bootstrap token may be created
	// with (defaults DefaultBootstrapMaxTTL and DefaultBootstrapMaxUses; a negative
	// BootstrapMaxUses sets no ceiling). A token asks for one use and 24 h unless it says more.
	BootstrapMaxTTL  time.Duration
	BootstrapMaxUses int64
	// RequireApproval makes every registration wait for an admin's approval, whatever its
	// bootstrap token says: the cluster is visible but receives nothing until approved. Off by
	// default, as before approvals existed; tokens can ask for it one by one (require_approval).
	RequireApproval bool
	// RegisterRetryWindow is how long after a registration a retry with the same bootstrap
	// token completes it again (new credential, no use taken) while the credential was never
	// used; DefaultRegisterRetryWindow when zero.
	RegisterRetryWindow time.Duration
	// MaxStreamsPerAgent caps the WatchConfig streams one cluster may hold on this replica
	// (DefaultMaxStreamsPerAgent when zero, no cap when negative).
	MaxStreamsPerAgent int
	// AgentCredentialTTL is how long an agent credential works; agents are asked to rotate it
	// once half of that has passed. AgentCredentialGrace is how long the credential a
	// rotation replaced keeps working. Defaults DefaultAgentCredentialTTL and
	// DefaultAgentCredentialGrace.
	AgentCredentialTTL, AgentCredentialGrace time.Duration
	// PprofAddr serves Go's /debug/pprof/ endpoints (plain HTTP) on this address; "" (the
	// default) disables them.
	PprofAddr string
	// ReadHeaderTimeout and IdleTimeout bound how long a connection may take to send a
	// request's headers and stay open without a request or stream (defaults 10 s and 2 min).
	ReadHeaderTimeout, IdleTimeout time.Duration
	// RequestReadTimeout bounds how long an authenticated call's request body may take to
	// arrive once its headers are in (default DefaultRequestReadTimeout).
	RequestReadTimeout time.Duration
	Log                *slog.Logger
	// Now is the clock (tests); time.Now by default.
	Now func() time.Time
}

// Default per-address limits: generous for a fleet registering through one NAT address, tight
// enough that a loop of bad credentials costs a few calls a minute.
var (
	DefaultRegisterLimit    = ratelimit.Limit{Burst: 30, Interval: 2 * time.Second}
	DefaultAuthFailureLimit = ratelimit.Limit{Burst: 10, Interval: 6 * time.Second}
)

// Ceilings of bootstrap tokens: a week and a thousand registrations, so a leaked token is
// worth a bounded number of clusters for a bounded time.
const (
	DefaultBootstrapMaxTTL  = 7 * 24 * time.Hour
	DefaultBootstrapMaxUses = 1000
	// DefaultRegisterRetryWindow covers an agent's retries with backoff after it failed to
	// store its credential, and is short enough that a copied token cannot take over a
	// cluster name much later.
	DefaultRegisterRetryWindow = 15 * time.Minute
	// DefaultMaxStreamsPerAgent: an agent holds one stream, two while it reconnects.
	DefaultMaxStreamsPerAgent = 4
	// An agent credential lives 30 days and is rotated after 15, so an agent offline for two
	// weeks still comes back; the replaced one works one more hour, enough to store the new one.
	DefaultAgentCredentialTTL   = 30 * 24 * time.Hour
	DefaultAgentCredentialGrace = time.Hour
	// DefaultRequestReadTimeout lets a 16 MiB bundle arrive at about 2 Mbit/s, and holds a
	// stalled request's handler a minute at most.
	DefaultRequestReadTimeout = time.Minute
)

func (c *Config) defaults() {
	if c.BootstrapMaxTTL == 0 {
		c.BootstrapMaxTTL = DefaultBootstrapMaxTTL
	}
	if c.AgentCredentialTTL == 0 {
		c.AgentCredentialTTL = DefaultAgentCredentialTTL
	}
	if c.AgentCredentialGrace == 0 {
		c.AgentCredentialGrace = DefaultAgentCredentialGrace
	}
	if c.MaxStreamsPerAgent == 0 {
		c.MaxStreamsPerAgent = DefaultMaxStreamsPerAgent
	}
	if c.ReadHeaderTimeout == 0 {
		c.ReadHeaderTimeout = 10 * time.Second
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 2 * time.Minute
	}
	if c.RequestReadTimeout == 0 {
		c.RequestReadTimeout = DefaultRequestReadTimeout
	}
	if c.RegisterRetryWindow == 0 {
		c.RegisterRetryWindow = DefaultRegisterRetryWindow
	}
	if c.BootstrapMaxUses == 0 {
		c.BootstrapMaxUses = DefaultBootstrapMaxUses
	}
	if c.RegisterLimit == (ratelimit.Limit{}) {
		c.RegisterLimit = DefaultRegisterLimit
	}
	if c.AuthFailureLimit == (ratelimit.Limit{}) {
		c.AuthFailureLimit = DefaultAuthFailureLimit
	}
	if c.Thresholds == (health.Thresholds{}) {
		c.Thresholds = health.DefaultThresholds
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = 15 * time.Second
	}
	if c.PollInterval == 0 {
		c.PollInterval = 2 * time.Second
	}
	if c.FleetInterval == 0 {
		c.FleetInterval = 2 * time.Second
	}
	if c.CredentialRecheck == 0 {
		c.CredentialRecheck = 30 * time.Second
	}
	if c.RolloutInterval == 0 {
		c.RolloutInterval = time.Second
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if len(c.Hosts) == 0 {
		c.Hosts = []string{"localhost", "127.0.0.1", "::1"}
		if h, err := os.Hostname(); err == nil && h != "" {
			c.Hosts = append(c.Hosts, h)
		}
	}
}

// Server is one hub replica.
type Server struct {
	cfg        Config
	log        *slog.Logger
	store      store.Store
	identity   *pki.Identity
	validator  *bundle.Validator
	builder    *assign.Builder
	dispatcher *dispatch.Dispatcher
	view       *fleet.View
	watcher    *fleet.Watcher
	rollouts   *rollout.Engine
	registry   *prometheus.Registry
	handler    http.Handler
	guard      *auth.Guard
	creds      *auth.CredentialCache
	// streamChecks ends the streams whose credential stopped working elsewhere.
	streamChecks *streamChecks
	previews     *previewState
	// leading: this replica drives rollouts (it holds the store's rollout lease).
	leading atomic.Bool

	// AdminToken is the secret of the admin token created on first start ("" otherwise).
	AdminToken string
}

// New opens the store (migrating it), loads or creates the TLS identity and, on first start,
// creates an admin API token. Close releases the store.
func New(ctx context.Context, cfg Config) (*Server, error) {
	cfg.defaults()
	if cfg.DataDir == "" {
		return nil, errors.New("a data directory is required")
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating data directory: %w", err)
	}
	s := &Server{cfg: cfg, log: cfg.Log}
	// An existing directory keeps its mode with MkdirAll: close it to other users too. A volume
	// root the hub does not own (a mount) cannot be changed; its files are private anyway.
	if err := os.Chmod(cfg.DataDir, 0o700); err != nil {
		s.log.Warn("could not make the data directory private to the hub's user; its files are", "dir", cfg.DataDir, "error", err)
	}
	var err error
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		return nil, errors.New("bring both a TLS certificate and its key, or neither")
	}
	if cfg.TLSCert != "" {
		s.identity, err = pki.Load(cfg.TLSCert, cfg.TLSKey)
	} else {
		s.identity, err = pki.LoadOrCreate(filepath.Join(cfg.DataDir, "pki"), cfg.Hosts, cfg.Now())
	}
	if err != nil {
		return nil, err
	}
	// Scripts (the demo, e2e tests) read the fingerprint agents must pin from here.
	if err := os.WriteFile(filepath.Join(cfg.DataDir, "ca-fingerprint"), []byte(s.identity.Fingerprint+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("writing the CA fingerprint: %w", err)
	}
	dsn := cfg.StoreDSN
	if dsn == "" {
		dsn = filepath.Join(cfg.DataDir, "hub.db")
	}
	s.store, err = sqlstore.Open(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("opening the hub store: %w", err)
	}
	if s.validator, err = bundle.NewValidator(); err != nil {
		s.store.Close()
		return nil, err
	}
	s.guard = auth.NewGuard(s.store, s.log, cfg.RegisterLimit, cfg.AuthFailureLimit, cfg.Now)
	s.creds = auth.NewCredentialCache(s.store, nil)
	s.streamChecks = newStreamChecks(s.creds, s.cfg.Now)
	s.previews = newPreviewState(cfg.Now)
	s.builder = assign.New(s.store)
	s.dispatcher = dispatch.New(s.store, s.builder, s.log)
	s.view = &fleet.View{Store: s.store, Builder: s.builder, Th: cfg.Thresholds, Now: cfg.Now}
	s.watcher = fleet.NewWatcher(s.view, s.listBundles, s.log)
	s.watcher.Rollouts = s.recentRollouts
	// One process on SQLite leads from the start; replicas on PostgreSQL once Serve took the lease.
	s.leading.Store(cfg.StoreDSN == "")
	s.rollouts = rollout.New(rollout.Config{Store: s.store, Thresholds: cfg.Thresholds, Now: cfg.Now, Log: s.log,
		Leading: s.leading.Load,
		Changed: func(moved bool) {
			if moved {
				s.dispatcher.Kick()
			}
			s.watcher.Poke()
		}})
	if err := s.bootstrapAdmin(ctx); err != nil {
		s.store.Close()
		return nil, err
	}
	s.handler = s.routes()
	return s, nil
}

// Identity is the hub's TLS identity; agents pin Identity().Fingerprint.
func (s *Server) Identity() *pki.Identity { return s.identity }

// Store exposes the store (tests and the benchmark seed data through it).
func (s *Server) Store() store.Store { return s.store }

// Connected is the number of agents holding a WatchConfig stream on this replica.
func (s *Server) Connected() int { return s.dispatcher.Connected() }

// Handler is the hub's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Close releases the store.
func (s *Server) Close() error { return s.store.Close() }

// bootstrapAdmin creates an admin API token when none exists, writes it to the data directory
// (owner-only) and keeps it in AdminToken for the caller to print once.
func (s *Server) bootstrapAdmin(ctx context.Context) error {
	tokens, err := s.store.ListAPITokens(ctx)
	if err != nil {
		return err
	}
	if len(tokens) > 0 {
		return nil
	}
	secret, hash, err := auth.NewSecret(auth.PrefixAPI)
	if err != nil {
		return err
	}
	id, err := auth.NewID()
	if err != nil {
		return err
	}
	err = s.store.CreateAPIToken(ctx, store.APIToken{ID: id, Name: "admin", Hash: hash, Role: store.RoleAdmin,
		CreatedBy: "hub", CreatedAt: s.cfg.Now()})
	if errors.Is(err, store.ErrConflict) {
		return nil // another replica starting at the same moment created it
	}
	if err != nil {
		return fmt.Errorf("creating the first admin token: %w", err)
	}
	path := filepath.Join(s.cfg.DataDir, "admin-token")
	if err := writePrivate(path, []byte(secret+"\n")); err != nil {
		return err
	}
	if err := s.store.AppendAudit(ctx, store.AuditEvent{Actor: "hub", Action: "CreateAPIToken",
		Target: "apitoken/" + id, Detail: "first admin token (name admin)"}); err != nil {
		return err
	}
	s.AdminToken = secret
	return nil
}

// writePrivate writes a file only the hub's user may read, whatever mode an existing file had
// (os.WriteFile keeps it).
func writePrivate(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("making %s private: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func (s *Server) routes() http.Handler {
	s.registry = prometheus.NewRegistry()
	s.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&health.Collector{Source: s.view.Snapshot, Connected: s.dispatcher.Connected, Log: s.log})
	s.registry.MustRegister(s.previews.collectors()...)
	s.registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kollect_hub_rollout_evaluations_total",
		Help: "Completed evaluations of an active rollout by the rollout engine (one per rollout per pass)."},
		func() float64 { return float64(s.rollouts.Evaluations()) }))
	s.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kollect_hub_rollout_leader",
		Help: "1 while this replica drives rollouts (holds the store's rollout lease), else 0."},
		func() float64 {
			if s.leading.Load() {
				return 1
			}
			return 0
		}))
	s.registry.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kollect_hub_refused_calls_total",
			Help: "Calls refused for their credential, token or role (this replica); each is logged and audited."},
			func() float64 { return float64(s.guard.Failures()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kollect_hub_rate_limited_calls_total",
			Help: "Calls refused with ResourceExhausted by a per-address limit (registrations, failed authentications)."},
			func() float64 { return float64(s.guard.Limited()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kollect_hub_refused_calls_unaudited_total",
			Help: "Refused calls whose audit event was dropped: the audit queue was full, or too many kinds of refusal were being counted within their minute."},
			func() float64 { return float64(s.guard.Unaudited()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kollect_hub_credential_lookups_total",
			Help: "Agent credential checks (every agent call and stream recheck) on this replica."},
			func() float64 { return float64(s.creds.Stats().Lookups) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kollect_hub_credential_store_reads_total",
			Help: "Agent credential checks that read the cluster from the store: the first of a credential, and the first after any registration change (kollect_hub_credential_lookups_total minus these were answered from memory)."},
			func() float64 { return float64(s.creds.Stats().StoreReads) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kollect_hub_cluster_epoch_reads_total",
			Help: "Reads of the cluster epoch that keep agent credential checks current: shared by the calls that arrive together; heartbeats of a known credential need none (their store write checks the credential)."},
			func() float64 { return float64(s.creds.Stats().EpochReads) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kollect_hub_credential_refreshes_total",
			Help: "Reads of every cluster's credentials that brought this replica's credential cache up to a moved cluster epoch at once (before its open streams are checked)."},
			func() float64 { return float64(s.creds.Stats().Refreshes) }))

	// Small messages (heartbeat acknowledgements, most unary answers) are sent uncompressed:
	// setting up gzip for a few hundred bytes costs more CPU than it saves bytes, and a
	// fleet's heartbeats are the hub's most frequent call.
	// opaqueInternal is outermost: it also hides what the authentication interceptors return.
	agentAuthn := &auth.AgentAuth{Credentials: s.creds, Guard: s.guard}
	fleetAuthz := &auth.FleetAuth{Store: s.store, Log: s.log, Guard: s.guard}
	agentAuth := connect.WithInterceptors(opaqueInternal{s.log}, agentAuthn)
	fleetAuth := connect.WithInterceptors(opaqueInternal{s.log}, fleetAuthz)
	agentSvc := fleetv1.File_kollect_fleet_v1_agent_proto.Services().ByName("AgentService")
	fleetSvc := fleetv1.File_kollect_fleet_v1_fleet_proto.Services().ByName("FleetService")
	r := chi.NewRouter()
	r.Use(middleware.Recoverer)
	// Every procedure reads at most its own limit (requestLimits): one handler per distinct
	// limit, each procedure routed to the handler of its limit.
	// Each handler is behind authenticateFirst: a call is authenticated from its headers
	// before its body is read (Register, whose bootstrap token is in its body, only passes
	// the registration limit there and reads at most its 64 KiB).
	mountLimited(r, agentSvc, func(limit int64) (string, http.Handler) {
		path, h := fleetv1connect.NewAgentServiceHandler(&agentService{s}, agentAuth,
			connect.WithReadMaxBytes(int(limit)), connect.WithCompressMinBytes(1024))
		return path, s.authenticateFirst(agentSvc, agentAuthn.Authenticate, h)
	})
	mountLimited(r, fleetSvc, func(limit int64) (string, http.Handler) {
		path, h := fleetv1connect.NewFleetServiceHandler(&fleetService{s: s}, fleetAuth,
			connect.WithReadMaxBytes(int(limit)), connect.WithCompressMinBytes(1024))
		return path, s.authenticateFirst(fleetSvc, fleetAuthz.Authorize, h)
	})
	// The fleet's metrics name every cluster and sink: viewers and up only.
	r.Handle("/metrics", auth.RequireToken(s.store, s.guard, store.RoleViewer, promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{})))
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	r.Get("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if _, err := s.store.ConfigEpoch(r.Context()); err != nil {
			// Anyone may ask: the cause goes to the log, not to the caller.
			s.log.Warn("not ready: the store does not answer", "error", err)
			http.Error(w, "store unavailable", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	r.Get("/ca.crt", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/x-pem-file")
		_, _ = w.Write(s.identity.CAPEM)
	})
	// The dashboard takes every path no route above claims (chi matches the most specific).
	r.Handle("/*", webui.Handler())
	return r
}

// rolloutLease is the name of the lease whose holder drives rollouts.
const rolloutLease = "rollouts"

// lead records whether this replica holds the rollout lease; on taking it, the engine
// evaluates at once (the previous holder may have died mid-rollout).
func (s *Server) lead(held bool) {
	if s.leading.Swap(held) == held {
		return
	}
	if held {
		s.log.Info("this replica drives rollouts now")
		s.rollouts.Wake()
		return
	}
	s.log.Warn("this replica no longer drives rollouts")
}

// handshakeTimeout is how long a client may take over its TLS handshake: the header timeout,
// which net/http applies to the handshake too, or 10 s without one.
func handshakeTimeout(readHeader time.Duration) time.Duration {
	if readHeader > 0 {
		return readHeader
	}
	return 10 * time.Second
}

// Serve serves the hub over TLS on ln until ctx ends, running the background loops with it,
// then shuts down gracefully (open streams are cut after 5 s).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(6)
	go func() { defer wg.Done(); s.guard.Run(ctx) }()
	go func() { defer wg.Done(); s.cleanPreviews(ctx) }()
	go func() { defer wg.Done(); s.dispatcher.Run(ctx, s.cfg.PollInterval) }()
	go func() { defer wg.Done(); s.watcher.Run(ctx, s.cfg.FleetInterval) }()
	go func() { defer wg.Done(); s.rollouts.Run(ctx, s.cfg.RolloutInterval) }()
	go func() { defer wg.Done(); s.streamChecks.run(ctx, s.cfg.CredentialRecheck) }()
	if l, ok := s.store.(store.Leaser); ok {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.HoldLease(ctx, rolloutLease, s.lead, func(err error) {
				s.log.WarnContext(ctx, "holding the rollout lease; another replica drives rollouts meanwhile", "error", err)
			})
		}()
	}
	if w, ok := s.store.(store.ConfigWatcher); ok {
		// Another replica's change reaches this replica's agents at once; the poll stays
		// as the safety net for a notification lost while the listening session was down.
		// The rollout engine hears of it too: a rollout created through another replica
		// starts at once.
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.WatchConfig(ctx, func() { s.dispatcher.Poke(); s.rollouts.Wake() }, func(err error) {
				s.log.WarnContext(ctx, "listening for other replicas' configuration changes; polling meanwhile", "error", err)
			})
		}()
	}
	if w, ok := s.store.(store.PreviewWatcher); ok {
		wg.Add(1)
		go func() { defer wg.Done(); s.relayPreviews(ctx, w) }()
	}
	if s.cfg.PprofAddr != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.servePprof(ctx, s.cfg.PprofAddr); err != nil {
				s.log.ErrorContext(ctx, "pprof endpoint", "error", err)
			}
		}()
	}
	defer wg.Wait()

	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		// An idle connection (no request, no open stream) is closed; agents hold a stream, so
		// theirs are never idle. It also applies to HTTP/2.
		IdleTimeout:    s.cfg.IdleTimeout,
		MaxHeaderBytes: maxHeaderBytes,
		TLSConfig: &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{s.identity.Certificate},
			NextProtos:   []string{"h2", "http/1.1"},
		},
		// Agents hold streams for days. An agent that vanished without closing TCP (a
		// powered-off node) is found by the kernel's keepalive probes, not by HTTP/2 pings,
		// which cost a timer per connection (see detectDeadPeer).
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: 100,
			// The hub's responses carry a handful of short headers, once a heartbeat, so an
			// HPACK table of them saves a few bytes a minute per agent and costs each
			// connection a table for as long as it lives: about 1.4 KiB an agent (7 MiB of a
			// replica's heap at 5,000). One byte holds no entry: responses go out literally.
			// The decoder's table is the clients' to fill and stays at the default.
			MaxEncoderHeaderTableSize: 1,
		},
		BaseContext: func(net.Listener) context.Context { return ctx },
		ErrorLog:    slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	// Streams wait on ctx (BaseContext), so cancelling it lets Shutdown finish.
	srv.RegisterOnShutdown(cancel)
	errc := make(chan error, 1)
	hl := newHandshakeListener(ln, srv.TLSConfig, handshakeTimeout(s.cfg.ReadHeaderTimeout), s.log)
	go func() { errc <- srv.Serve(hl) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, stop := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer stop()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close()
	}
	return nil
}
