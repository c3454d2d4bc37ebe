package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"kollect.dev/agent/internal/certs"
	"kollect.dev/agent/internal/collector"
	"kollect.dev/agent/internal/inventory"
	"kollect.dev/agent/internal/inventory/delivery"
	"kollect.dev/agent/internal/memory"
	kollectwebhook "kollect.dev/agent/internal/webhook"
)

// termDrain bounds how long a term that lost its lease may take to stop its exports before
// the next term campaigns anyway (a sink ignoring its context would otherwise hold the
// process out of the election for good).
const termDrain = 30 * time.Second

// Run runs the agent until ctx ends: kollect-agent's main loop. The process is a shell that
// lives as long as ctx (metrics, probes, webhook server and certificates) around a sequence
// of terms, each a complete controller-runtime manager with the pipeline and its leader
// election. A term that loses the lease ends whole, as controller-runtime ends a manager, and
// the next term starts at once as a standby: it syncs its watches and campaigns again, under
// the same identity, so after an API outage that no other replica used it takes the lease
// back without waiting for it to expire. See doc.go for why terms and not an exit.
func Run(ctx context.Context, cfg *rest.Config, o Options) error {
	o, err := defaults(o)
	if err != nil {
		return err
	}
	log := o.Log
	writer, err := writerIdentity(ctx, cfg, o)
	if err != nil {
		return err
	}
	log.Info("agent identity in the sinks' state", "version", writer.Version, "instance", writer.Instance)
	reg := metricsRegistry(o)
	sh := termShared{colMetrics: collector.NewMetrics(reg), delMetrics: delivery.NewMetrics(reg), invMetrics: inventory.NewMetrics(reg), factories: factories(o, reg),
		metricsAddr: "0", healthAddr: "0", skipNames: true, writer: writer}
	shell, err := newShell(cfg, o)
	if err != nil {
		return err
	}
	var newLock func() (resourcelock.Interface, error)
	if o.LeaderElection {
		if newLock, err = leaseLock(cfg, o); err != nil {
			return err
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	shellDone := make(chan error, 1)
	go func() {
		err := shell.Start(ctx)
		cancel() // the terms end with the shell: a process without probes or webhooks is no agent
		shellDone <- err
	}()
	for term := 1; ; term++ {
		if newLock != nil {
			if sh.lock, err = newLock(); err != nil {
				cancel()
				return errors.Join(err, <-shellDone)
			}
		}
		mgr, tr, err := build(cfg, o, sh)
		if err != nil {
			cancel()
			return errors.Join(err, <-shellDone)
		}
		log.Info("starting a term", "term", term, "leaderElection", o.LeaderElection)
		if term == 1 && o.ReleaseStartupMemoryAfter > 0 {
			go releaseStartupMemory(ctx, mgr, o.ReleaseStartupMemoryAfter, tr.watchSynced, tr.loadSettled, log.WithName("memory"))
		}
		err = mgr.Start(ctx)
		if ctx.Err() != nil {
			tr.wait(termDrain, log)
			return errors.Join(err, <-shellDone)
		}
		if !leaseLost(err) {
			cancel()
			return errors.Join(fmt.Errorf("term %d: %w", term, err), <-shellDone)
		}
		// controller-runtime returns at once when the lease is lost (no graceful shutdown):
		// the runnables that export are awaited here, so two terms never export together.
		stopped := time.Now()
		tr.wait(termDrain, log)
		log.Info("lost the leader lease: stepped down, campaigning again as a standby", "term", term,
			"drained", time.Since(stopped).Round(time.Millisecond).String())
	}
}

// releaseStartupMemory hands the pages only start-up used back to the kernel (see package
// memory): once when the manager's caches have synced, so that the initial lists of the
// watched kinds do not add to the start-up's pages; whenever a watched kind's initial list has
// been projected (watchSynced, at most every watchReleaseEvery), so that its decoding garbage
// and the code only listing ran are not carried into the first exports, where the agent's
// peak is; and once more when the initial load is over: at least after, and once every
// inventory has been built and exported (settled), so that the garbage of the first exports is
// returned too. At a million objects the first export ends minutes after the caches synced,
// and the runtime kept hundreds of MiB of freed heap until it was asked to return them.
// settled is polled; after settleLimit the release happens anyway (a sink that never answers
// must not keep it). Once per process: a later term's start touches little that the first
// did not.
func releaseStartupMemory(ctx context.Context, mgr manager.Manager, after time.Duration, watchSynced <-chan struct{},
	settled func() bool, log logr.Logger) {
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		return
	}
	release := func(when string) {
		before, _ := memory.Resident()
		advised, err := memory.Release()
		now, _ := memory.Resident()
		if err != nil {
			log.Error(err, "could not release the start-up pages; the freed heap was returned", "when", when, "resident", now.String())
			return
		}
		log.Info("released start-up memory", "when", when, "before", before.String(), "after", now.String(), "advisedMiB", advised>>20)
	}
	if adv := memory.StartupAdvice(); adv.Err != nil {
		log.Error(adv.Err, "could not advise random reads of the executable at start-up", "advisedMiB", adv.Advised>>20)
	} else {
		log.Info("executable read at random since start-up", "advisedMiB", adv.Advised>>20, "evicted", adv.Evicted, "off", adv.Off)
	}
	release("caches synced")
	settledDone := make(chan bool, 1)
	go func() {
		select {
		case <-ctx.Done():
			settledDone <- false
			return
		case <-time.After(after):
		}
		settledDone <- waitSettled(ctx, settled, settleQuiet, settleLimit)
	}()
	var last time.Time
	for {
		select {
		case ok := <-settledDone:
			if ok {
				release("settled")
			}
			return
		case <-watchSynced:
			if time.Since(last) >= watchReleaseEvery {
				release("watch synced")
				last = time.Now()
			}
		}
	}
}

// watchReleaseEvery spaces the releases after watches synced (a kind per target kind, each
// listing at start-up).
const watchReleaseEvery = 5 * time.Second

// waitSettled waits until settled has held for quiet in a row, or limit has passed; it reports
// false when ctx ended first. Why a quiet period: a first export is followed by a round of
// status writes (every inventory, target and scope), whose garbage belongs to the load too.
func waitSettled(ctx context.Context, settled func() bool, quiet, limit time.Duration) bool {
	poll := time.NewTicker(max(min(time.Second, quiet/5), time.Millisecond))
	defer poll.Stop()
	var since time.Time
	for end := time.Now().Add(limit); settled != nil && time.Now().Before(end); {
		if !settled() {
			since = time.Time{}
		} else if since.IsZero() {
			since = time.Now()
		} else if time.Since(since) >= quiet {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-poll.C:
		}
	}
	return ctx.Err() == nil
}

// settleLimit bounds how long the second start-up release waits for the initial load, and
// settleQuiet is how long the load must have been over.
const (
	settleLimit = 15 * time.Minute
	settleQuiet = 10 * time.Second
)

// leaseLost says whether a manager ended because it lost its lease. controller-runtime
// reports that with a plain error (no sentinel); TestLostLeaseStepsDownInProcess fails
// if its wording changes.
func leaseLost(err error) bool {
	return err != nil && strings.Contains(err.Error(), "leader election lost")
}

// metricsOptions serves /metrics at addr: in plain HTTP to anyone, or, secure, over TLS (a
// certificate controller-runtime generates) to callers the API server authenticates
// (TokenReview) and authorises for get on the non-resource URL /metrics (SubjectAccessReview):
// the metrics name every inventory, sink and namespace the agent serves.
func metricsOptions(addr string, secure bool) metricsserver.Options {
	o := metricsserver.Options{BindAddress: addr}
	if secure {
		o.SecureServing = true
		o.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	return o
}

// newShell is a manager without leader election or watches that serves, for the process's
// life, what must not go away with a term: metrics, /healthz and /readyz, and the webhook
// with its certificates. It binds the ports once, so a new term never races the old one's
// listeners.
func newShell(cfg *rest.Config, o Options) (manager.Manager, error) {
	skip := true
	shell, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: Scheme(), Logger: o.Log.WithName("shell"),
		Metrics:                metricsOptions(o.MetricsAddr, o.MetricsSecure),
		HealthProbeBindAddress: o.HealthAddr,
		// On the shell, not a term: a profile must survive a lost lease to show what led to it.
		PprofBindAddress: o.PprofAddr,
		Controller:       config.Controller{SkipNameValidation: &skip},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the process manager: %w", err)
	}
	ping := func(*http.Request) error { return nil }
	if err := shell.AddHealthzCheck("ping", ping); err != nil {
		return nil, err
	}
	if err := shell.AddReadyzCheck("ping", ping); err != nil {
		return nil, err
	}
	if o.WebhookPort <= 0 {
		return shell, nil
	}
	cm, err := certManager(cfg, o)
	if err != nil {
		return nil, err
	}
	srv := webhook.NewServer(webhook.Options{Host: o.WebhookHost, Port: o.WebhookPort, CertDir: o.CertDir})
	kollectwebhook.Register(srv, shell.GetScheme(),
		&kollectwebhook.ClientLookup{Reader: shell.GetAPIReader(), Mapper: shell.GetRESTMapper(), TenantMode: o.TenantMode, Cluster: o.Cluster})
	if err := shell.AddReadyzCheck("webhook", srv.StartedChecker()); err != nil {
		return nil, err
	}
	// Not the shell's WebhookServer: controller-runtime would start it before anything else,
	// and it needs the certificate files ensureCerts writes.
	return shell, shell.Add(&certifiedWebhook{srv: srv, certs: cm, log: o.Log.WithName("certs")})
}

// certifiedWebhook serves the webhook once its certificate is on disk. With managed
// certificates it waits for the API server (ensureCerts) instead of exiting, so an agent
// restarted during an API outage comes up, probes answering, and serves when it can.
type certifiedWebhook struct {
	srv   webhook.Server
	certs *certs.Manager
	log   logr.Logger
}

func (w *certifiedWebhook) Start(ctx context.Context) error {
	if w.certs != nil {
		if err := ensureCerts(ctx, w.certs, w.log); err != nil {
			return nil // ctx ended while waiting: a shutdown, not a failure
		}
		go func() { _ = w.certs.Start(ctx) }()
	}
	return w.srv.Start(ctx)
}

func (*certifiedWebhook) NeedLeaderElection() bool { return false }

// ensureCerts issues or loads the webhook certificate, retrying with backoff (1 s doubling to
// 30 s) while the API server does not answer; it returns an error only when ctx ends.
func ensureCerts(ctx context.Context, cm *certs.Manager, log logr.Logger) error {
	delay := time.Second
	for {
		attempt, cancel := context.WithTimeout(ctx, 15*time.Second)
		err := cm.Ensure(attempt)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		log.Error(err, "webhook certificates not ready; the webhook serves once they are", "retryIn", delay.String())
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, 30*time.Second)
	}
}

// leaseLock returns a factory of Lease locks that all carry one identity, chosen once per
// process. Every term needs a lock of its own (the lock caches the Lease it last read), and
// the same identity lets a term take over the unexpired lease of the term before it.
func leaseLock(cfg *rest.Config, o Options) (func() (resourcelock.Interface, error), error) {
	ns := o.LeaderElectionNamespace
	if ns == "" {
		raw, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
		if err != nil {
			return nil, fmt.Errorf("leader election needs a namespace outside a cluster (--leader-election-namespace): %w", err)
		}
		ns = strings.TrimSpace(string(raw))
	}
	host, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("leader-election identity: %w", err)
	}
	id := host + "_" + string(uuid.NewUUID())
	cs, err := kubernetes.NewForConfig(rest.AddUserAgent(rest.CopyConfig(cfg), "leader-election"))
	if err != nil {
		return nil, fmt.Errorf("leader-election client: %w", err)
	}
	return func() (resourcelock.Interface, error) {
		l, err := resourcelock.New(resourcelock.LeasesResourceLock, ns, o.LeaderElectionID, cs.CoreV1(), cs.CoordinationV1(),
			resourcelock.ResourceLockConfig{Identity: id})
		if err != nil {
			return nil, fmt.Errorf("leader-election lock %s/%s: %w", ns, o.LeaderElectionID, err)
		}
		return l, nil
	}, nil
}

// tracker knows which of a term's runnables are still running, so that the next term starts
// only after they returned. A runnable that never started (a leader-only one on a standby)
// does not count.
type tracker struct {
	mu      sync.Mutex
	sealed  bool
	running sync.WaitGroup
	// settled, set by setup, reports whether the term's initial load is over
	// (inventory.Manager.Settled).
	settled func() bool
	// watchSynced receives (without blocking the collector) when a watch of the term synced.
	watchSynced chan struct{}
}

// loadSettled reports whether the term's initial load is over; true for a term without
// inventories to wait for.
func (t *tracker) loadSettled() bool { return t.settled == nil || t.settled() }

func (t *tracker) track(r manager.Runnable) manager.Runnable {
	need := true
	if l, ok := r.(manager.LeaderElectionRunnable); ok {
		need = l.NeedLeaderElection()
	}
	return trackedRunnable{r: r, t: t, needLeader: need}
}

// wait seals the tracker and waits up to limit for the runnables that started.
func (t *tracker) wait(limit time.Duration, log logr.Logger) {
	t.mu.Lock()
	t.sealed = true
	t.mu.Unlock()
	done := make(chan struct{})
	go func() { t.running.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(limit):
		log.Info("runnables of the ended term still running; starting the next term anyway", "waited", limit.String())
	}
}

type trackedRunnable struct {
	r          manager.Runnable
	t          *tracker
	needLeader bool
}

func (r trackedRunnable) Start(ctx context.Context) error {
	r.t.mu.Lock()
	if r.t.sealed {
		r.t.mu.Unlock()
		return nil
	}
	r.t.running.Add(1)
	r.t.mu.Unlock()
	defer r.t.running.Done()
	return r.r.Start(ctx)
}

func (r trackedRunnable) NeedLeaderElection() bool { return r.needLeader }
