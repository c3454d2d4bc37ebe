package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"kollect.dev/agent/internal/certs"
	"kollect.dev/agent/internal/collector"
	"kollect.dev/agent/internal/controller"
	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/hubclient"
	"kollect.dev/agent/internal/inventory"
	"kollect.dev/agent/internal/inventory/delivery"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/backends"
	"kollect.dev/agent/internal/sink/egress"
	kollectwebhook "kollect.dev/agent/internal/webhook"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// Options configure an agent.
type Options struct {
	// Cluster is the name stamped on every row; required.
	Cluster string
	// Namespaces limits the agent (its Kollect objects and its watches); empty means all.
	Namespaces []string
	// TenantMode requires a KollectScope for every namespace with Kollect objects. The
	// binary's --tenant-mode defaults to true; the zero Options run open, as component tests do.
	TenantMode bool
	// MetricsAddr and HealthAddr are listen addresses; "0" disables.
	MetricsAddr, HealthAddr string
	// MetricsSecure serves metrics over TLS to callers the API server authenticates and
	// authorises for get on /metrics (the chart's default); otherwise in plain HTTP to anyone.
	MetricsSecure bool
	// ReleaseStartupMemoryAfter, when not zero, is how long after the first term's caches
	// synced the process hands its start-up pages back to the kernel (package memory).
	ReleaseStartupMemoryAfter time.Duration
	// PprofAddr serves Go's /debug/pprof/ on the process shell; "" (the default) disables it.
	PprofAddr string
	// PodNamespace is the agent's own namespace (--pod-namespace, $POD_NAMESPACE), which
	// names this installation in the sinks' writer identity (writerIdentity).
	PodNamespace string
	// LeaderElection enables leader election with a warm standby.
	LeaderElection          bool
	LeaderElectionNamespace string
	LeaderElectionID        string
	// LeaseDuration, RenewDeadline and RetryPeriod tune leader election; zero is
	// controller-runtime's default (15s/10s/2s). kollect-agent's flags default to 6s/4s/1s.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Sinks are the sink types this agent can build. Nil means the production table, every
	// backend built into the agent (package sink/backends), as kollect-agent runs; tests pass
	// tables of test sinks.
	Sinks sink.Factories
	// AllowLocalSinks lets sinks connect to loopback and unspecified addresses and use
	// file:// URLs (tests, the demo). Link-local and cloud metadata addresses are refused
	// whatever it says; see package sink/egress.
	AllowLocalSinks bool
	// CacheDir holds sink working state (git clones); a temp dir when empty.
	CacheDir string
	// Backoff overrides the delivery workers' retry schedule (tests).
	Backoff delivery.Backoff
	// SinkRecheck is how often sinks are probed again when healthy.
	SinkRecheck time.Duration
	// Hub connects the agent to a fleet hub; nil runs the agent standalone.
	Hub *hubclient.Options
	// WebhookPort serves the validating webhooks of the Kollect kinds; 0 disables them.
	WebhookPort int
	// WebhookHost is the webhook server's listen address (default: every interface).
	WebhookHost string
	// CertDir holds the webhook server's tls.crt and tls.key: written by the agent when
	// ManageWebhookCerts is set, mounted (cert-manager) otherwise.
	CertDir string
	// ManageWebhookCerts makes the agent issue and rotate its own serving certificate (a
	// self-signed CA in WebhookSecretName) and patch the CA bundle into WebhookConfigName.
	ManageWebhookCerts bool
	// WebhookConfigName is the ValidatingWebhookConfiguration of the agent.
	WebhookConfigName string
	// WebhookService and WebhookNamespace name the Service in front of the webhook (the
	// certificate's DNS names) and the namespace of the certificate Secret.
	WebhookService, WebhookNamespace string
	// WebhookSecretName holds the CA and serving certificate (default kollect-agent-webhook-tls).
	WebhookSecretName string
	// ProfileBudget holds every profile to a CEL cost budget (collector.BudgetOptions); nil is
	// collector.DefaultBudget, a zero Rate disables budgets.
	ProfileBudget *collector.BudgetOptions
	// Behind says when a watch is behind (collector.BehindOptions); nil is
	// collector.DefaultBehind.
	Behind *collector.BehindOptions
	// Registry receives the agent's own metrics instead of controller-runtime's registry
	// (tests); nil uses that, or a private registry with SkipNameValidation.
	Registry prometheus.Registerer
	// SkipNameValidation allows several agents in one process (tests, demo).
	SkipNameValidation bool
	Log                logr.Logger
}

// Scheme knows the built-in types and every Kollect kind.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(kollectv1.AddToScheme(s))
	return s
}

// New builds an agent's manager; start it with Start. The manager serves metrics, probes and
// webhooks itself, and it exits when it loses the leader lease: tests and the demo embed it.
// kollect-agent runs the agent through Run, which outlives lost leases.
func New(cfg *rest.Config, o Options) (manager.Manager, error) {
	o, err := defaults(o)
	if err != nil {
		return nil, err
	}
	webhookServer, certMgr, err := webhookServing(cfg, o)
	if err != nil {
		return nil, err
	}
	writer, err := writerIdentity(context.Background(), cfg, o)
	if err != nil {
		return nil, err
	}
	reg := metricsRegistry(o)
	mgr, _, err := build(cfg, o, termShared{
		webhookServer: webhookServer, metricsAddr: o.MetricsAddr, healthAddr: o.HealthAddr,
		colMetrics: collector.NewMetrics(reg), delMetrics: delivery.NewMetrics(reg), invMetrics: inventory.NewMetrics(reg), factories: factories(o, reg),
		writer: writer,
	})
	if err != nil {
		return nil, err
	}
	if o.WebhookPort > 0 {
		kollectwebhook.Register(mgr.GetWebhookServer(), mgr.GetScheme(),
			&kollectwebhook.ClientLookup{Reader: mgr.GetAPIReader(), Mapper: mgr.GetRESTMapper(), TenantMode: o.TenantMode, Cluster: o.Cluster})
		if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
			return nil, err
		}
	}
	if certMgr != nil {
		if err := mgr.Add(certMgr); err != nil {
			return nil, err
		}
	}
	return mgr, nil
}

func defaults(o Options) (Options, error) {
	if o.Cluster == "" {
		return o, errors.New("a cluster name is required: it labels every exported row")
	}
	if o.CacheDir == "" {
		dir, err := os.MkdirTemp("", "kollect-agent-")
		if err != nil {
			return o, fmt.Errorf("creating a cache directory: %w", err)
		}
		o.CacheDir = dir
	}
	if o.SinkRecheck == 0 {
		o.SinkRecheck = 10 * time.Minute
	}
	if o.ProfileBudget == nil {
		o.ProfileBudget = &collector.DefaultBudget
	}
	if o.Behind == nil {
		o.Behind = &collector.DefaultBehind
	}
	return o, nil
}

func factories(o Options, reg prometheus.Registerer) sink.Factories {
	if o.Sinks != nil {
		return o.Sinks
	}
	return backends.Factories(reg)
}

// termShared is what a manager built by build takes from outside: with New, its own servers
// and metrics; with Run, the process's metrics, a lock with the process's identity, and no
// servers (the process serves them across terms).
type termShared struct {
	webhookServer           webhook.Server
	metricsAddr, healthAddr string
	colMetrics              *collector.Metrics
	delMetrics              *delivery.Metrics
	invMetrics              *inventory.Metrics
	factories               sink.Factories
	// writer is this agent in the sinks' state (writerIdentity).
	writer export.Writer
	// lock, when set, is the leader-election lock (Run: one identity for every term).
	lock resourcelock.Interface
	// skipNames lets a later term register the controllers' names again.
	skipNames bool
}

// build makes a manager with the agent's pipeline. The returned tracker knows when the
// runnables that write outside the API server (exports, the hub) have returned.
func build(cfg *rest.Config, o Options, sh termShared) (manager.Manager, *tracker, error) {
	cacheOpts := cache.Options{}
	if len(o.Namespaces) > 0 {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range o.Namespaces {
			cacheOpts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	skipNames := o.SkipNameValidation || sh.skipNames
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		WebhookServer:           sh.webhookServer,
		Scheme:                  Scheme(),
		Logger:                  o.Log,
		Cache:                   cacheOpts,
		Metrics:                 metricsOptions(sh.metricsAddr, o.MetricsSecure),
		HealthProbeBindAddress:  sh.healthAddr,
		LeaderElection:          o.LeaderElection,
		LeaderElectionNamespace: o.LeaderElectionNamespace,
		LeaderElectionID:        o.LeaderElectionID,
		// A stopping leader hands over at once instead of letting its lease expire.
		LeaderElectionReleaseOnCancel:       true,
		LeaderElectionResourceLockInterface: sh.lock,
		LeaseDuration:                       nonZero(o.LeaseDuration),
		RenewDeadline:                       nonZero(o.RenewDeadline),
		RetryPeriod:                         nonZero(o.RetryPeriod),
		Controller:                          config.Controller{SkipNameValidation: &skipNames, CacheSyncTimeout: cacheSyncTimeout},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("creating manager: %w", err)
	}
	if err := mgr.Add(cacheSyncProgress{cache: mgr.GetCache(), interval: 30 * time.Second, log: o.Log.WithName("caches")}); err != nil {
		return nil, nil, err
	}
	tr := &tracker{watchSynced: make(chan struct{}, 1)}
	if err := setup(mgr, cfg, o, sh, tr); err != nil {
		return nil, nil, err
	}
	return mgr, tr, nil
}

// webhookServing builds the webhook server and, when the agent manages its certificates,
// issues them before the server starts (it reads CertDir at start). New gives up after 30 s;
// Run retries until the API server answers (see ensureCerts).
func webhookServing(cfg *rest.Config, o Options) (webhook.Server, *certs.Manager, error) {
	if o.WebhookPort <= 0 {
		return nil, nil, nil
	}
	srv := webhook.NewServer(webhook.Options{Host: o.WebhookHost, Port: o.WebhookPort, CertDir: o.CertDir})
	cm, err := certManager(cfg, o)
	if err != nil || cm == nil {
		return srv, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cm.Ensure(ctx); err != nil {
		return nil, nil, fmt.Errorf("webhook certificates: %w", err)
	}
	return srv, cm, nil
}

// certManager is the webhook certificates' manager, nil when they are mounted.
func certManager(cfg *rest.Config, o Options) (*certs.Manager, error) {
	if !o.ManageWebhookCerts {
		return nil, nil
	}
	if o.CertDir == "" || o.WebhookService == "" || o.WebhookNamespace == "" {
		return nil, errors.New("managing webhook certificates needs a certificate directory, the webhook Service and its namespace")
	}
	c, err := client.New(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		return nil, fmt.Errorf("client for webhook certificates: %w", err)
	}
	secret := o.WebhookSecretName
	if secret == "" {
		secret = "kollect-agent-webhook-tls"
	}
	svc, ns := o.WebhookService, o.WebhookNamespace
	return certs.New(certs.Options{Client: c, Namespace: ns, SecretName: secret, WebhookConfigName: o.WebhookConfigName,
		DNSNames: []string{svc + "." + ns + ".svc", svc + "." + ns + ".svc.cluster.local", svc + "." + ns, svc},
		CertDir:  o.CertDir, Log: o.Log.WithName("certs")})
}

func setup(mgr manager.Manager, cfg *rest.Config, o Options, sh termShared, tr *tracker) error {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return err
	}
	builtin, err := builtinWatches(cfg, o.Log)
	if err != nil {
		return err
	}
	nsLabels := func(name string) (labels.Set, bool) {
		ns := &corev1.Namespace{}
		if err := mgr.GetCache().Get(context.Background(), client.ObjectKey{Name: name}, ns); err != nil {
			return nil, false
		}
		return ns.Labels, true
	}
	col := collector.New(dyn, collector.Options{Namespaces: o.Namespaces, NamespaceLabels: nsLabels, Metadata: meta, Builtin: builtin,
		Budget: *o.ProfileBudget, Behind: *o.Behind, Metrics: sh.colMetrics, Log: o.Log.WithName("collector")})
	profileRefresh := make(chan event.TypedGenericEvent[client.Object], 1024)
	col.SubscribeQuarantined(func(name string) {
		ns, n, _ := strings.Cut(name, "/")
		p := &kollectv1.KollectProfile{}
		p.Namespace, p.Name = ns, n
		send(profileRefresh, event.TypedGenericEvent[client.Object]{Object: p})
	})

	targetRefresh := make(chan event.TypedGenericEvent[collector.TargetKey], 4096)
	invChanged := make(chan event.TypedGenericEvent[inventory.Key], 4096)
	invMgr := inventory.NewManager(col, inventory.Options{
		Cluster: o.Cluster, Writer: sh.writer, Ready: mgr.Elected(), Metrics: sh.delMetrics, Coverage: sh.invMetrics, Log: o.Log.WithName("inventory"),
		Backoff:   o.Backoff,
		OnStatus:  func(k inventory.Key) { send(invChanged, event.TypedGenericEvent[inventory.Key]{Object: k}) },
		OnTargets: func(keys []collector.TargetKey) { sendAll(targetRefresh, keys) },
		StateDir:  filepath.Join(o.CacheDir, "inventories"),
	})
	tr.settled = invMgr.Settled
	col.SubscribeSynced(func(keys []collector.TargetKey) {
		sendAll(targetRefresh, keys)
		select {
		case tr.watchSynced <- struct{}{}:
		default:
		}
	})
	sinks := controller.NewSinkBuilder(sh.factories, mgr.GetAPIReader(), o.Cluster, filepath.Join(o.CacheDir, "sinks"),
		egress.New(egress.Policy{AllowLocal: o.AllowLocalSinks}), o.Log.WithName("sink"))
	profiles := controller.NewProfiles()
	rec := mgr.GetEventRecorder("kollect-agent")
	invRec := &controller.InventoryReconciler{Client: mgr.GetClient(), Manager: invMgr, Sinks: sinks, Elected: mgr.Elected(),
		Recorder: rec, Changed: invChanged}
	gate := &controller.ScopeGate{Reader: mgr.GetClient(), TenantMode: o.TenantMode, NamespaceLabels: nsLabels,
		OnTargetPermission: func(k collector.TargetKey) { invRec.TargetPermissionChanged(context.Background(), k) }}
	invRec.Scopes = gate
	sinks.GovernBy(gate)
	errs := []error{
		mgr.Add(tr.track(col)), mgr.Add(tr.track(invMgr)), mgr.Add(namespaceWatch{cache: mgr.GetCache(), changed: col.NamespacesChanged, log: o.Log.WithName("namespaces")}),
		(&controller.ProfileReconciler{Client: mgr.GetClient(), Profiles: profiles, Elected: mgr.Elected(), Recorder: rec,
			Quarantined: col.Quarantined, Refresh: profileRefresh}).SetupWithManager(mgr),
		(&controller.TargetReconciler{Client: mgr.GetClient(), Mapper: mgr.GetRESTMapper(), Profiles: profiles, Collector: col,
			Elected: mgr.Elected(), Recorder: rec, Refresh: targetRefresh, Scopes: gate}).SetupWithManager(mgr),
		invRec.SetupWithManager(mgr),
		(&controller.ScopeStatusReconciler{Client: mgr.GetClient(), Elected: mgr.Elected()}).SetupWithManager(mgr),
		mgr.AddHealthzCheck("ping", func(*http.Request) error { return nil }),
		// Without a readiness check controller-runtime answers /readyz with 404, so an agent
		// without webhooks (the chart's webhook.enabled=false) would never become Ready.
		mgr.AddReadyzCheck("ping", func(*http.Request) error { return nil }),
	}
	if o.Hub != nil {
		hub := *o.Hub
		hub.Cluster, hub.Log = o.Cluster, o.Log.WithName("hub")
		hc, err := hubclient.New(hub, cfg, mgr.GetClient(), mgr.GetAPIReader(), mgr.GetCache())
		if err != nil {
			return fmt.Errorf("hub client: %w", err)
		}
		errs = append(errs, mgr.Add(tr.track(hc)))
	}
	for _, fam := range []kollectv1.SinkFamily{kollectv1.SinkFamilySnapshot, kollectv1.SinkFamilyDatabase, kollectv1.SinkFamilyEvent} {
		errs = append(errs, (&controller.SinkReconciler{Client: mgr.GetClient(), Sinks: sinks, Family: fam, Recheck: o.SinkRecheck}).SetupWithManager(mgr))
	}
	return errors.Join(errs...)
}

// namespaceWatch tells the collector when namespace labels change, so targets that select
// namespaces by label follow them. Every replica runs it, like the collector.
type namespaceWatch struct {
	cache   cache.Cache
	changed func()
	log     logr.Logger
}

// Start retries the informer while the API server does not answer (its REST mapping needs
// discovery): an error here would end the manager, and with it, during an outage, the agent.
func (n namespaceWatch) Start(ctx context.Context) error {
	var inf cache.Informer
	for delay := time.Second; ; delay = min(2*delay, 30*time.Second) {
		var err error
		if inf, err = n.cache.GetInformer(ctx, &corev1.Namespace{}); err == nil {
			break
		}
		n.log.Error(err, "watching namespaces; retrying", "retryIn", delay.String())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
	}
	_, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { n.changed() },
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*corev1.Namespace)
			c, ok2 := newObj.(*corev1.Namespace)
			if !ok1 || !ok2 || !labels.Equals(o.Labels, c.Labels) {
				n.changed()
			}
		},
		DeleteFunc: func(any) { n.changed() },
	})
	if err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

func (namespaceWatch) NeedLeaderElection() bool { return false }

func nonZero(d time.Duration) *time.Duration {
	if d == 0 {
		return nil
	}
	return &d
}

// send never blocks the pipeline: when the channel is full the event is delivered later.
func send[T any](ch chan event.TypedGenericEvent[T], e event.TypedGenericEvent[T]) {
	select {
	case ch <- e:
	default:
		go func() { ch <- e }()
	}
}

func sendAll[T any](ch chan event.TypedGenericEvent[T], keys []T) {
	for _, k := range keys {
		send(ch, event.TypedGenericEvent[T]{Object: k})
	}
}

// builtinWatches serves the watches of built-in kinds in protobuf when the API server is no
// newer than the agent's client-go (collector.NewBuiltin); otherwise, or when the server's
// version cannot be read, every kind is watched as JSON.
func builtinWatches(cfg *rest.Config, log logr.Logger) (*collector.Builtin, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the discovery client: %w", err)
	}
	v, err := dc.ServerVersion()
	if err != nil {
		log.Info("watching every kind as JSON: the API server's version is unknown", "error", err.Error())
		return nil, nil
	}
	b, err := collector.NewBuiltin(cfg, v.Minor)
	if err != nil {
		return nil, err
	}
	if b == nil {
		log.Info("watching every kind as JSON: the API server is newer than the agent's client", "server", v.GitVersion)
	}
	return b, nil
}
