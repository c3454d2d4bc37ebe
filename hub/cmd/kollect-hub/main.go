package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"kollect.dev/api/version"
	"kollect.dev/hub/internal/health"
	"kollect.dev/hub/internal/ratelimit"
	"kollect.dev/hub/internal/server"
)

// defaultGCPercent is the hub's garbage-collection target when GOGC is not set. A hub's live
// memory is its agents' connections — goroutine stacks, TLS and HTTP/2 state, a few dozen KiB
// each — and Go's default lets the heap grow to twice that before collecting: at 5,000 agents
// a replica held about 330 MiB and grew to 640 MiB. Its allocations between collections come
// from heartbeats, a few MiB a second at 10,000 agents, so collecting sooner costs little CPU
// (docs/performance.md, "A hub of 10,000 agents").
const defaultGCPercent = 25

func main() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGCPercent)
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "kollect-hub:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		listen     = flag.String("listen", ":8443", "address to serve on (always TLS: Connect, gRPC and gRPC-Web)")
		dataDir    = flag.String("data-dir", "kollect-hub-data", "directory for the SQLite store, the generated CA and the first admin token")
		storeDSN   = flag.String("store", "", "postgres://… URL to share state between several hub replicas (default: SQLite in --data-dir)")
		tlsCert    = flag.String("tls-cert", "", "serving certificate chain (PEM); default: a CA and certificate the hub creates in --data-dir")
		tlsKey     = flag.String("tls-key", "", "key of --tls-cert (PEM)")
		hosts      = flag.String("hosts", "", "comma-separated DNS names and IPs for the generated certificate (default: localhost, loopback IPs, hostname)")
		stale      = flag.Duration("stale-after", health.DefaultThresholds.StaleAfter, "heartbeat age after which a cluster is stale")
		offline    = flag.Duration("offline-after", health.DefaultThresholds.OfflineAfter, "heartbeat age after which a cluster is offline")
		heartbeat  = flag.Duration("heartbeat-interval", 15*time.Second, "heartbeat interval agents are told to use")
		poll       = flag.Duration("poll-interval", 2*time.Second, "how often to look for changes made through other replicas")
		rollouts   = flag.Duration("rollout-interval", time.Second, "how often active rollouts are re-evaluated when no heartbeat prompts it sooner")
		regBurst   = flag.Int("register-burst", server.DefaultRegisterLimit.Burst, "registrations one client address may make at once (0 disables the limit)")
		regEvery   = flag.Duration("register-interval", server.DefaultRegisterLimit.Interval, "one more registration per client address per interval once the burst is spent")
		failBurst  = flag.Int("auth-failure-burst", server.DefaultAuthFailureLimit.Burst, "failed authentications one client address, or one presented credential, may make before its failing calls are refused with ResourceExhausted (0 disables the limit)")
		failEvery  = flag.Duration("auth-failure-interval", server.DefaultAuthFailureLimit.Interval, "one more failed authentication per client address (and per credential) per interval once the burst is spent")
		bootTTL    = flag.Duration("bootstrap-token-max-ttl", server.DefaultBootstrapMaxTTL, "longest time to live a bootstrap token may be created with (tokens live 24h unless they ask otherwise)")
		bootUses   = flag.Int64("bootstrap-token-max-uses", server.DefaultBootstrapMaxUses, "most registrations a bootstrap token may be created for (tokens allow one unless they ask otherwise; 0: no ceiling)")
		approval   = flag.Bool("require-approval", false, "every registration waits for an admin's approval (kollect hub clusters approve NAME), whatever its bootstrap token says: the cluster is visible but receives no bundle until approved. The secure choice when bootstrap tokens are handed to many people; tokens can also require it one by one (kollect hub token create --require-approval)")
		retryWin   = flag.Duration("register-retry-window", server.DefaultRegisterRetryWindow, "how long a registration retried with the same bootstrap token completes the first one (while its credential was never used) instead of being refused")
		maxStreams = flag.Int("max-streams-per-agent", server.DefaultMaxStreamsPerAgent, "configuration streams one cluster's agent may hold open on this replica (0: no cap)")
		idle       = flag.Duration("idle-timeout", 2*time.Minute, "close a connection that has had no request and no open stream for this long")
		bodyRead   = flag.Duration("request-read-timeout", server.DefaultRequestReadTimeout, "how long an authenticated call's request body may take to arrive once its headers are in (unauthenticated calls are refused before their body is read)")
		credTTL    = flag.Duration("agent-credential-ttl", server.DefaultAgentCredentialTTL, "how long an agent credential works; agents rotate it over their connection once half of it has passed")
		credGrace  = flag.Duration("agent-credential-grace", server.DefaultAgentCredentialGrace, "how long the credential a rotation replaced keeps working")
		pprofAddr  = flag.String("pprof-bind-address", "", "address of Go's /debug/pprof/ endpoints (CPU, heap, goroutine profiles; plain HTTP); empty disables them. Bind it to loopback: profiles reveal memory contents")
		logLevel   = flag.String("log-level", "info", "debug, info, warn or error")
		jsonOutput = flag.Bool("log-json", false, "log JSON instead of text")
		showVer    = flag.Bool("version", false, "print the hub's version and exit")
		showToken  = flag.Bool("print-admin-token", false, "print the first admin API token the hub wrote into --data-dir and exit (kubectl exec POD -- kollect-hub --data-dir=… --print-admin-token: the image has no shell)")
	)
	flag.Parse()
	if *showVer {
		fmt.Println("kollect-hub", version.String())
		return nil
	}
	if *showToken {
		token, err := os.ReadFile(filepath.Join(*dataDir, "admin-token"))
		if err != nil {
			return fmt.Errorf("reading the first admin token (only the replica that started on an empty store wrote one): %w", err)
		}
		fmt.Println(strings.TrimSpace(string(token)))
		return nil
	}

	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	var handler slog.Handler = slog.NewTextHandler(os.Stderr, opts)
	if *jsonOutput {
		handler = slog.NewJSONHandler(os.Stderr, opts)
	}
	log := slog.New(handler)
	slog.SetDefault(log)
	if *offline <= *stale {
		return errors.New("--offline-after must be longer than --stale-after")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := server.Config{
		DataDir: *dataDir, StoreDSN: *storeDSN, TLSCert: *tlsCert, TLSKey: *tlsKey,
		Thresholds:        health.Thresholds{StaleAfter: *stale, OfflineAfter: *offline},
		HeartbeatInterval: *heartbeat, PollInterval: *poll, RolloutInterval: *rollouts, Log: log,
		RegisterLimit:    limit(*regBurst, *regEvery),
		AuthFailureLimit: limit(*failBurst, *failEvery),
		BootstrapMaxTTL:  *bootTTL, BootstrapMaxUses: *bootUses, RegisterRetryWindow: *retryWin, RequireApproval: *approval,
		MaxStreamsPerAgent: *maxStreams, IdleTimeout: *idle, RequestReadTimeout: *bodyRead, PprofAddr: *pprofAddr,
		AgentCredentialTTL: *credTTL, AgentCredentialGrace: *credGrace,
	}
	if *maxStreams == 0 {
		cfg.MaxStreamsPerAgent = -1
	}
	if *credTTL <= 0 || *credGrace <= 0 {
		return errors.New("--agent-credential-ttl and --agent-credential-grace must be positive")
	}
	if *bodyRead <= 0 {
		return errors.New("--request-read-timeout must be positive")
	}
	if *idle <= 0 {
		return errors.New("--idle-timeout must be positive")
	}
	if *bootUses == 0 {
		cfg.BootstrapMaxUses = -1
	}
	if *bootTTL <= 0 {
		return errors.New("--bootstrap-token-max-ttl must be positive")
	}
	if *hosts != "" {
		cfg.Hosts = strings.Split(*hosts, ",")
	}
	hub, err := server.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer hub.Close()

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", *listen, err)
	}
	log.Info("hub serving", "version", version.String(), "address", ln.Addr().String(), "caFingerprint", hub.Identity().Fingerprint,
		"dataDir", *dataDir)
	if hub.AdminToken != "" {
		// Never the token itself: logs are collected and kept where a token must not be.
		fmt.Fprintf(os.Stderr, "\nFirst start: the first admin API token is in %s (readable by this user only).\n\n",
			filepath.Join(*dataDir, "admin-token"))
	}
	fmt.Fprintf(os.Stderr, "Agents pin the hub CA: %s\n", hub.Identity().Fingerprint)
	return hub.Serve(ctx, ln)
}

// limit turns a burst flag into a limit; 0 disables it (a negative Burst, for server.Config).
func limit(burst int, interval time.Duration) ratelimit.Limit {
	if burst <= 0 || interval <= 0 {
		return ratelimit.Limit{Burst: -1}
	}
	return ratelimit.Limit{Burst: burst, Interval: interval}
}
