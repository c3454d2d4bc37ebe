// Command kollect-agent is the Kollect agent: one per cluster, it watches what the cluster's
// Kollect objects select and exports canonical rows, labelled with its cluster, to sinks.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"kollect.dev/agent/internal/agent"
	"kollect.dev/agent/internal/collector"
	"kollect.dev/agent/internal/inventory/delivery"
	"kollect.dev/agent/internal/memory"
	"kollect.dev/agent/internal/tracing"
	"kollect.dev/api/version"
)

func main() {
	memory.ApplyGCDefault()
	var (
		o          agent.Options
		namespaces string
		err        error
	)
	flag.StringVar(&o.Cluster, "cluster-name", os.Getenv("KOLLECT_CLUSTER"), "Name of this cluster, stamped on every exported row (required; default $KOLLECT_CLUSTER).")
	flag.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8080", "Address of the Prometheus metrics endpoint; 0 disables it.")
	flag.BoolVar(&o.MetricsSecure, "metrics-secure", false, "Serve metrics over TLS, only to callers the API server authenticates and authorises for get on the non-resource URL /metrics (the agent then needs create on tokenreviews and subjectaccessreviews; the chart turns this on and grants both).")
	flag.StringVar(&o.HealthAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints.")
	flag.DurationVar(&o.ReleaseStartupMemoryAfter, "release-startup-memory-after", 30*time.Second,
		"Give the kernel back the pages of the binary that only start-up used, and the Go runtime's freed heap, once the package initialisers have run, when the agent's caches have synced, and again this long after (the idle agent's RSS drops by about 70 MiB); 0 keeps them resident.")
	flag.StringVar(&o.PprofAddr, "pprof-bind-address", "", "Address of Go's /debug/pprof/ endpoints (heap, CPU, goroutine profiles); empty disables them. Bind it to loopback: profiles reveal memory contents.")
	flag.BoolVar(&o.LeaderElection, "leader-elect", false, "Elect a leader so several replicas run as one agent with warm standbys.")
	flag.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader-election Lease (default: the pod's).")
	flag.StringVar(&o.LeaderElectionID, "leader-election-id", "kollect-agent.kollect.dev", "Name of the leader-election Lease.")
	// 6s/4s/1s: a standby takes over a killed leader within lease duration + 2.2 retry periods
	// (client-go jitters its retries by up to 120%), 8.2 s at most; a leader gives up a lease it
	// cannot renew for 4 s, before the lease lapses (4 s + 1 s < 6 s), and stands by again.
	flag.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", 6*time.Second,
		"How long a standby waits, after it last saw the leader renew, before taking the Lease over.")
	flag.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", 4*time.Second,
		"How long the leader retries renewing before it steps down to standby (less than the lease duration).")
	flag.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", time.Second,
		"How often the leader renews and a standby tries to take over.")
	flag.StringVar(&namespaces, "namespaces", "", "Comma-separated namespaces the agent may watch; empty means all.")
	flag.BoolVar(&o.TenantMode, "tenant-mode", true, "Confine tenants: a namespace's Kollect objects may do nothing until a KollectScope of that namespace allows it. --tenant-mode=false runs open, for a single-team cluster.")
	flag.IntVar(&o.WebhookPort, "webhook-port", 0, "Port of the validating webhooks for the Kollect kinds; 0 disables them.")
	flag.StringVar(&o.CertDir, "webhook-cert-dir", "/tmp/kollect-webhook-certs", "Directory of the webhook's tls.crt and tls.key.")
	flag.BoolVar(&o.ManageWebhookCerts, "manage-webhook-certs", true,
		"Issue and rotate the webhook certificate (self-signed CA) and patch the CA bundle; false serves what is mounted in --webhook-cert-dir (cert-manager).")
	flag.StringVar(&o.WebhookConfigName, "webhook-config-name", "kollect-agent", "Name of the agent's ValidatingWebhookConfiguration.")
	flag.StringVar(&o.WebhookService, "webhook-service", "kollect-agent-webhook", "Service in front of the webhook (the certificate's DNS names).")
	flag.StringVar(&o.WebhookNamespace, "webhook-namespace", os.Getenv("POD_NAMESPACE"), "Namespace of the webhook Service and certificate Secret (default $POD_NAMESPACE).")
	flag.StringVar(&o.WebhookSecretName, "webhook-secret", "kollect-agent-webhook-tls", "Secret holding the webhook CA and serving certificate.")
	flag.BoolVar(&o.AllowLocalSinks, "allow-local-sinks", false,
		"Let sinks connect to loopback and unspecified addresses and use file:// URLs (tests and demos); link-local and cloud metadata addresses are refused regardless.")
	flag.StringVar(&o.CacheDir, "cache-dir", "", "Directory for sink working state such as git clones, and each inventory's last snapshot, from which a restarted agent keeps the rows of a target it cannot collect; a volume here saves re-cloning, and keeps those rows, across a restart (default: a temporary directory).")
	var costRate, costBurst uint64
	flag.Uint64Var(&costRate, "profile-cost-rate", uint64(collector.DefaultBudget.Rate),
		"CEL cost units per second each profile may spend on average (its attributes and its targets' match expressions); a profile over its budget is quarantined; 0 disables budgets.")
	flag.Uint64Var(&costBurst, "profile-cost-burst", uint64(collector.DefaultBudget.Burst),
		"CEL cost units a profile may spend at once (an initial list, a mass update) before --profile-cost-rate holds it back.")
	breakerCooldown := flag.Duration("sink-breaker-cooldown", delivery.DefaultBackoff.BreakerCooldown,
		"How long a sink's exports wait once five consecutive failures opened its circuit breaker; the sink's connection test still runs every 5 s meanwhile, and a passing test retries at once.")
	var hub hubFlags
	hub.bind(flag.CommandLine)
	// Export failures are logged at error level, every attempt: a stack trace of the
	// delivery worker would bury the sink's message, so traces start at panic unless asked.
	stackLevel := zapcore.PanicLevel
	zapOpts := zap.Options{StacktraceLevel: stackLevel}
	zapOpts.BindFlags(flag.CommandLine)
	printVersion := flag.Bool("version", false, "Print the agent's version and exit.")
	flag.Parse()
	o.ProfileBudget = &collector.BudgetOptions{Rate: float64(costRate), Burst: float64(costBurst)}
	if *breakerCooldown <= 0 {
		fmt.Fprintln(os.Stderr, "kollect-agent: --sink-breaker-cooldown must be positive")
		os.Exit(2)
	}
	o.Backoff = delivery.DefaultBackoff
	o.Backoff.BreakerCooldown = *breakerCooldown
	if *printVersion {
		fmt.Println("kollect-agent", version.String())
		return
	}

	log := capVerbosity(zap.New(zap.UseFlagOptions(&zapOpts)))
	ctrl.SetLogger(log)
	if o.ReleaseStartupMemoryAfter > 0 {
		// The package initialisers have run and most of what they touched (descriptor and
		// scheme registrations of every linked library) is never run again: give it back now,
		// before the manager's start adds its own pages to the start-up peak. The agent
		// releases again when its caches have synced (see releaseStartupMemory).
		if _, err := memory.Release(); err != nil {
			log.V(1).Info("could not release the initialisers' pages", "error", err.Error())
		}
	}
	for _, ns := range strings.Split(namespaces, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			o.Namespaces = append(o.Namespaces, ns)
		}
	}
	o.PodNamespace = hub.own
	if o.Hub, err = hub.options(); err != nil {
		fmt.Fprintln(os.Stderr, "kollect-agent:", err)
		os.Exit(2)
	}
	o.Log = log

	log.Info("starting kollect-agent", "version", version.String(), "cluster", o.Cluster, "namespaces", o.Namespaces, "leaderElection", o.LeaderElection)
	ctx := ctrl.SetupSignalHandler()
	// Off unless the OTEL_* environment asks for traces (see package tracing).
	shutdownTracing, err := tracing.Setup(ctx, log.WithName("tracing"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "kollect-agent:", err)
		os.Exit(2)
	}
	// Run returns only on SIGTERM or an error no retry fixes: a lost lease or an API outage
	// does not end the process.
	err = agent.Run(ctx, ctrl.GetConfigOrDie(), o)
	// The spans of the last exports are flushed even on SIGTERM (ctx is done by then).
	if terr := shutdownTracing(context.WithoutCancel(ctx)); terr != nil {
		log.Error(terr, "stopping tracing")
	}
	if err != nil {
		log.Error(err, "agent stopped")
		os.Exit(1)
	}
}
