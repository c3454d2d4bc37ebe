package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/dynamic"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"kollect.dev/agent/internal/certs"
	"kollect.dev/agent/internal/collector"
	"kollect.dev/agent/internal/controller"
	"kollect.dev/agent/internal/hubclient"
	"kollect.dev/agent/internal/inventory"
	"kollect.dev/agent/internal/inventory/delivery"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/backends"
	kollectwebhook "kollect.dev/agent/internal/webhook"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// Options configure an agent.
type Options struct {
	// Cluster is the name stamped on every row; required.
	Cluster string
	// Namespaces limits the agent (its Kollect objects and its watches); empty means all.
	Namespaces []string
	// TenantMode requires a KollectScope for every namespace with Kollect objects.
	TenantMode bool
	// MetricsAddr and HealthAddr are listen addresses; "0" disables.
	MetricsAddr, HealthAddr string
	// LeaderElection enables leader election with a warm standby.
	LeaderElection          bool
	LeaderElectionNamespace string
	LeaderElectionID        string
	// LeaseDuration, RenewDeadline and RetryPeriod tune leader election (defaults 15s/10s/2s).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Sinks are the sink types this agent can build. Nil means the production table, every
	// backend built into the agent (package sink/backends), as kollect-agent runs; tests pass
	// tables of test sinks.
	Sinks sink.Factories
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

// New builds an agent's manager; start it with Start.
func New(cfg *rest.Config, o Options) (manager.Manager, error) {
	if o.Cluster == "" {
		return nil, errors.New("a cluster name is required: it labels every exported row")
	}
	if o.CacheDir == "" {
		dir, err := os.MkdirTemp("", "kollect-agent-")
		if err != nil {
			return nil, err
		}
		o.CacheDir = dir
	}
	if o.SinkRecheck == 0 {
		o.SinkRecheck = 10 * time.Minute
	}
	cacheOpts := cache.Options{}
	if len(o.Namespaces) > 0 {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range o.Namespaces {
			cacheOpts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	webhookServer, certMgr, err := webhookServing(cfg, o)
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		WebhookServer:           webhookServer,
		Scheme:                  Scheme(),
		Logger:                  o.Log,
		Cache:                   cacheOpts,
		Metrics:                 metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress:  o.HealthAddr,
		LeaderElection:          o.LeaderElection,
		LeaderElectionNamespace: o.LeaderElectionNamespace,
		LeaderElectionID:        o.LeaderElectionID,
		// A stopping leader hands over at once instead of letting its lease expire.
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 nonZero(o.LeaseDuration),
		RenewDeadline:                 nonZero(o.RenewDeadline),
		RetryPeriod:                   nonZero(o.RetryPeriod),
		Controller:                    config.Controller{SkipNameValidation: &o.SkipNameValidation},
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	if err := setup(mgr, cfg, o); err != nil {
		return nil, err
	}
	if o.WebhookPort > 0 {
		kollectwebhook.Register(mgr.GetWebhookServer(), mgr.GetScheme(),
			&kollectwebhook.ClientLookup{Reader: mgr.GetAPIReader(), Mapper: mgr.GetRESTMapper(), TenantMode: o.TenantMode})
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

// webhookServing builds the webhook server and, when the agent manages its certificates,
// issues them before the server starts (it reads CertDir at start).
func webhookServing(cfg *rest.Config, o Options) (webhook.Server, *certs.Manager, error) {
	if o.WebhookPort <= 0 {
		return nil, nil, nil
	}
	srv := webhook.NewServer(webhook.Options{Host: o.WebhookHost, Port: o.WebhookPort, CertDir: o.CertDir})
	if !o.ManageWebhookCerts {
		return srv, nil, nil
	}
	if o.CertDir == "" || o.WebhookService == "" || o.WebhookNamespace == "" {
		return nil, nil, errors.New("managing webhook certificates needs a certificate directory, the webhook Service and its namespace")
	}
	c, err := client.New(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		return nil, nil, fmt.Errorf("client for webhook certificates: %w", err)
	}
	secret := o.WebhookSecretName
	if secret == "" {
		secret = "kollect-agent-webhook-tls"
	}
	svc, ns := o.WebhookService, o.WebhookNamespace
	cm, err := certs.New(certs.Options{Client: c, Namespace: ns, SecretName: secret, WebhookConfigName: o.WebhookConfigName,
		DNSNames: []string{svc + "." + ns + ".svc", svc + "." + ns + ".svc.cluster.local", svc + "." + ns, svc},
		CertDir:  o.CertDir, Log: o.Log.WithName("certs")})
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cm.Ensure(ctx); err != nil {
		return nil, nil, fmt.Errorf("webhook certificates: %w", err)
	}
	return srv, cm, nil
}

func setup(mgr manager.Manager, cfg *rest.Config, o Options) error {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return err
	}
	reg := metricsRegistry(o.SkipNameValidation)
	nsLabels := func(name string) (labels.Set, bool) {
		ns := &corev1.Namespace{}
		if err := mgr.GetCache().Get(context.Background(), client.ObjectKey{Name: name}, ns); err != nil {
			return nil, false
		}
		return ns.Labels, true
	}
	col := collector.New(dyn, collector.Options{Namespaces: o.Namespaces, NamespaceLabels: nsLabels, Metadata: meta,
		Metrics: collector.NewMetrics(reg), Log: o.Log.WithName("collector")})

	targetRefresh := make(chan event.TypedGenericEvent[collector.TargetKey], 4096)
	invChanged := make(chan event.TypedGenericEvent[inventory.Key], 4096)
	invMgr := inventory.NewManager(col, inventory.Options{
		Cluster: o.Cluster, Ready: mgr.Elected(), Metrics: delivery.NewMetrics(reg), Log: o.Log.WithName("inventory"),
		Backoff:   o.Backoff,
		OnStatus:  func(k inventory.Key) { send(invChanged, event.TypedGenericEvent[inventory.Key]{Object: k}) },
		OnTargets: func(keys []collector.TargetKey) { sendAll(targetRefresh, keys) },
		StateDir:  filepath.Join(o.CacheDir, "inventories"),
	})
	col.SubscribeSynced(func(keys []collector.TargetKey) { sendAll(targetRefresh, keys) })
	factories := o.Sinks
	if factories == nil {
		factories = backends.Factories(reg)
	}
	sinks := controller.NewSinkBuilder(factories, mgr.GetAPIReader(), o.Cluster, filepath.Join(o.CacheDir, "sinks"), o.Log.WithName("sink"))
	profiles := controller.NewProfiles()
	rec := mgr.GetEventRecorder("kollect-agent")
	invRec := &controller.InventoryReconciler{Client: mgr.GetClient(), Manager: invMgr, Sinks: sinks, Elected: mgr.Elected(),
		Recorder: rec, Changed: invChanged}
	gate := &controller.ScopeGate{Reader: mgr.GetClient(), TenantMode: o.TenantMode, NamespaceLabels: nsLabels,
		OnTargetPermission: func(k collector.TargetKey) { invRec.TargetPermissionChanged(context.Background(), k) }}
	invRec.Scopes = gate
	errs := []error{
		mgr.Add(col), mgr.Add(invMgr), mgr.Add(namespaceWatch{cache: mgr.GetCache(), changed: col.NamespacesChanged}),
		(&controller.ProfileReconciler{Client: mgr.GetClient(), Profiles: profiles, Elected: mgr.Elected(), Recorder: rec}).SetupWithManager(mgr),
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
		errs = append(errs, mgr.Add(hc))
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
}

func (n namespaceWatch) Start(ctx context.Context) error {
	inf, err := n.cache.GetInformer(ctx, &corev1.Namespace{})
	if err != nil {
		return fmt.Errorf("watching namespaces: %w", err)
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
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
