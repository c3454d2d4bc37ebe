package fleetsim

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"
)

// Inventory is one simulated KollectInventory.
type Inventory struct {
	Namespace, Name string
	Items           int64
	// NotReady reports Ready=False with this reason.
	NotReady string
	// Degraded reports Degraded=True with this reason (Degraded=False otherwise), as the agent
	// does when a target is forbidden while the inventory still exports.
	Degraded string
	// Coverage is reported as the inventory's coverage per target; nil reports one complete
	// target, <namespace>/all-<name>, holding every item.
	Coverage []*fleetv1.TargetCoverage
	// Growth, when set, adds Growth.By items every Growth.Every since the agent registered: an
	// inventory that grows in steps, as a cluster's does while workloads are added.
	Growth struct {
		By    int64
		Every time.Duration
	}
}

// count is the item count at now for an agent registered at start.
func (inv Inventory) count(start, now time.Time) int64 {
	if inv.Growth.Every <= 0 {
		return inv.Items
	}
	return inv.Items + inv.Growth.By*int64(now.Sub(start)/inv.Growth.Every)
}

// Sink is one simulated sink.
type Sink struct {
	Kind, Namespace, Name, Type string
	// Age is how long before each heartbeat the last export succeeded, give or take
	// exportEvery; negative means never.
	Age time.Duration
	// Error is the last export error ("" for none) and Class its class.
	Error string
	Class fleetv1.SinkErrorClass
	// NotFound reports the sink as named by an inventory but missing from the cluster, as the
	// agent does (give it an Error and a negative Age, as the agent sends no export time).
	NotFound bool
}

// exportEvery is how often a simulated sink exports: its last success moves in steps, as a real
// sink's does, so that the heartbeats in between change nothing the hub shows.
const exportEvery = 15 * time.Second

// Cluster describes one simulated agent and the cluster behind it.
type Cluster struct {
	Name         string
	Labels       map[string]string
	AgentVersion string
	K8sVersion   string
	Inventories  []Inventory
	Sinks        []Sink
	// DriftObject names an object (kind/name) reported as DRIFT_REVERTED instead of APPLIED.
	DriftObject string
	// RefuseObject names an object (kind/name) the agent refuses (REFUSED, outside its
	// allowlist) instead of applying it, with RefuseMessage.
	RefuseObject, RefuseMessage string
	// Heartbeats stops the agent after this many heartbeats (0: never), so it turns stale and
	// then offline, like a cluster that became unreachable.
	Heartbeats int
	// PreviewErrors is how many objects of each target fail on its first attribute when the
	// agent answers a bundle preview (preview.go).
	PreviewErrors int
}

// Fleet is a set of simulated agents talking to one hub, of one replica or several.
type Fleet struct {
	hubURLs   []string
	bootstrap string
	client    *http.Client
	interval  time.Duration

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	agents map[string]*agent
}

// New prepares a fleet for the hub at hubURL (https://host:port) whose CA certificate is caPEM;
// agents register with the bootstrap token and heartbeat every interval. hubURL may list
// several replicas, comma-separated, as kollect-agent's --hub-url does, and the simulated
// agents fail over as kollect-agent does: each starts with a random replica, stays with it,
// and moves to the next one at once when a call or its stream fails for want of an answer.
func New(hubURL string, caPEM []byte, bootstrap string, interval time.Duration) (*Fleet, error) {
	var urls []string
	for _, u := range strings.Split(hubURL, ",") {
		if u = strings.TrimSpace(u); u != "" {
			urls = append(urls, u)
		}
	}
	if len(urls) == 0 {
		return nil, errors.New("fleetsim: no hub URL")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("fleetsim: no certificate in the hub CA PEM")
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Fleet{
		hubURLs: urls, bootstrap: bootstrap, interval: interval, ctx: ctx, cancel: cancel,
		agents: map[string]*agent{},
		client: &http.Client{Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			ForceAttemptHTTP2: true,
			// As the agent's transport does (agent/internal/hubdial): a ping after 30 s without
			// a frame from the hub, so that a hub serves the pings of a real fleet.
			HTTP2: &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 10 * time.Second},
		}},
	}, nil
}

// Register registers a cluster and sends one heartbeat, without starting an agent: the cluster
// then ages to stale and offline. It is how a test fills a large fleet cheaply.
func (f *Fleet) Register(ctx context.Context, c Cluster) error {
	a, err := f.register(ctx, c)
	if err != nil {
		return err
	}
	if err := a.report(ctx); err != nil {
		return fmt.Errorf("heartbeat of %s: %w", c.Name, err)
	}
	return nil
}

func (f *Fleet) register(ctx context.Context, c Cluster) (*agent, error) {
	a := &agent{fleet: f, spec: c, kick: make(chan struct{}, 1), start: time.Now()}
	a.cur.Store(int32(rand.IntN(len(f.hubURLs))))
	bearer := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if cred := a.cred(); cred != "" {
				req.Header().Set("Authorization", "Bearer "+cred)
			}
			return next(ctx, req)
		}
	})
	for _, u := range f.hubURLs {
		a.clients = append(a.clients, fleetv1connect.NewAgentServiceClient(f.client, u, connect.WithInterceptors(bearer, streamBearer(a))))
	}
	err := a.call(func(api fleetv1connect.AgentServiceClient) error {
		resp, err := api.Register(ctx, connect.NewRequest(&fleetv1.RegisterRequest{
			ClusterName: c.Name, Labels: c.Labels, BootstrapToken: f.bootstrap,
			AgentVersion: c.AgentVersion, KubernetesVersion: c.K8sVersion,
		}))
		if err == nil {
			a.mu.Lock()
			a.credential = resp.Msg.GetCredential()
			a.mu.Unlock()
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("registering %s: %w", c.Name, err)
	}
	return a, nil
}

// Add registers a cluster and starts its agent. It returns once the hub accepted the
// registration and the first heartbeat.
func (f *Fleet) Add(ctx context.Context, c Cluster) error {
	a, err := f.register(ctx, c)
	if err != nil {
		return err
	}
	if err := a.report(ctx); err != nil {
		return fmt.Errorf("first heartbeat of %s: %w", c.Name, err)
	}
	f.mu.Lock()
	f.agents[c.Name] = a
	f.mu.Unlock()
	f.wg.Add(2)
	go func() { defer f.wg.Done(); a.watch(f.ctx) }()
	go func() { defer f.wg.Done(); a.heartbeat(f.ctx) }()
	return nil
}

// Stopped reports whether a cluster's agent has stopped (revoked, deleted or out of
// heartbeats), and why.
func (f *Fleet) Stopped(name string) (bool, error) {
	f.mu.Lock()
	a := f.agents[name]
	f.mu.Unlock()
	if a == nil {
		return false, fmt.Errorf("no simulated cluster %s", name)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stopped, a.stopErr
}

// Close stops every agent.
func (f *Fleet) Close() {
	f.cancel()
	f.wg.Wait()
	f.client.CloseIdleConnections()
}

// Report sends one heartbeat of a running cluster's agent now and returns the hub's answer,
// e.g. to show that a credential revoked through one replica is refused by the one the
// agent is connected to at its very next call.
func (f *Fleet) Report(ctx context.Context, name string) error {
	f.mu.Lock()
	a := f.agents[name]
	f.mu.Unlock()
	if a == nil {
		return fmt.Errorf("no simulated cluster %s", name)
	}
	return a.report(ctx)
}

// Connection is where a simulated agent's configuration stream is.
type Connection struct {
	// URL of the replica the agent talks to.
	URL string
	// Since is when the open stream received its first message; zero while it has none.
	Since time.Time
	// LastError is why the agent's previous stream ended or could not open, and when.
	LastError string
}

// Connections returns every running agent's connection by cluster name.
func (f *Fleet) Connections() map[string]Connection {
	f.mu.Lock()
	agents := make([]*agent, 0, len(f.agents))
	for _, a := range f.agents {
		agents = append(agents, a)
	}
	f.mu.Unlock()
	out := make(map[string]Connection, len(agents))
	for _, a := range agents {
		a.mu.Lock()
		out[a.spec.Name] = Connection{URL: a.fleet.hubURLs[int(a.cur.Load())], Since: a.since, LastError: a.lastErr}
		a.mu.Unlock()
	}
	return out
}

// streamBearer adds the credential to the WatchConfig stream.
func streamBearer(a *agent) connect.Interceptor { return streamAuth{a} }

type streamAuth struct{ a *agent }

func (s streamAuth) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return next }
func (s streamAuth) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", "Bearer "+s.a.cred())
		return conn
	}
}
func (s streamAuth) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// agent is one simulated agent.
type agent struct {
	fleet *Fleet
	spec  Cluster
	// clients has one client per hub URL; cur is the one the agent talks to.
	clients []fleetv1connect.AgentServiceClient
	cur     atomic.Int32
	kick    chan struct{}
	start   time.Time // registration

	mu         sync.Mutex
	credential string
	since      time.Time // first message of the open stream
	lastErr    string    // why the last stream ended or could not open, with when
	config     *fleetv1.WatchConfigResponse
	heartbeats int
	stopped    bool
	stopErr    error
}

func (a *agent) cred() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.credential
}

// answered reports whether err is an answer of the hub, as opposed to the want of one (a
// replica refusing connections, gone mid-call or mid-stream), which moves the agent on to
// the next replica.
func answered(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeUnknown, connect.CodeInternal, connect.CodeDeadlineExceeded:
		return false
	}
	return true
}

// failed moves the agent from replica idx to the next one, unless another call already did.
func (a *agent) failed(idx int32) {
	a.cur.CompareAndSwap(idx, (idx+1)%int32(len(a.clients)))
}

// call runs fn on the current replica and, while replicas fail to answer, on each next one.
func (a *agent) call(fn func(fleetv1connect.AgentServiceClient) error) error {
	var err error
	for range a.clients {
		idx := a.cur.Load()
		if err = fn(a.clients[idx]); err == nil || answered(err) {
			return err
		}
		a.failed(idx)
	}
	return err
}

func (a *agent) stop(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stopped, a.stopErr = true, err
}

func (a *agent) isStopped() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stopped
}

// watch follows WatchConfig until the hub refuses the agent. A stream that breaks after it
// delivered reconnects at once, to the next replica when the hub stopped answering; any
// other reconnects after a second.
func (a *agent) watch(ctx context.Context) {
	for ctx.Err() == nil && !a.isStopped() {
		idx := a.cur.Load()
		received := false
		stream, err := a.clients[idx].WatchConfig(ctx, connect.NewRequest(&fleetv1.WatchConfigRequest{}))
		if err == nil {
			for stream.Receive() {
				if p := stream.Msg().GetPreview(); p != nil {
					// The message repeats the configuration held: only the preview is new.
					a.fleet.wg.Add(1)
					go func() { defer a.fleet.wg.Done(); _ = a.answerPreview(ctx, p) }()
					continue
				}
				a.mu.Lock()
				if !received {
					a.since = time.Now()
				}
				received = true
				a.config = stream.Msg()
				a.mu.Unlock()
				select { // apply at once: report the new revision without waiting a period
				case a.kick <- struct{}{}:
				default:
				}
			}
			err = stream.Err()
			_ = stream.Close()
		}
		a.mu.Lock()
		a.since = time.Time{}
		a.lastErr = fmt.Sprintf("%s at %s", err, time.Now().Format("15:04:05.000"))
		a.mu.Unlock()
		if connect.CodeOf(err) == connect.CodeUnauthenticated {
			a.stop(err)
			return
		}
		if ctx.Err() == nil && !answered(err) {
			a.failed(idx)
			if received {
				continue
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (a *agent) heartbeat(ctx context.Context) {
	t := time.NewTicker(a.fleet.interval)
	defer t.Stop()
	for !a.isStopped() {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-a.kick:
		}
		if a.spec.Heartbeats > 0 && a.heartbeats >= a.spec.Heartbeats {
			a.stop(errors.New("simulated outage: out of heartbeats"))
			return
		}
		if err := a.report(ctx); connect.CodeOf(err) == connect.CodeUnauthenticated {
			a.stop(err)
			return
		}
	}
}

// report sends one heartbeat: every received bundle applied, inventories and sinks as
// specified.
func (a *agent) report(ctx context.Context) error {
	now := time.Now()
	a.mu.Lock()
	cfg := a.config
	a.heartbeats++
	a.mu.Unlock()
	st := &fleetv1.AgentStatus{AgentVersion: a.spec.AgentVersion, KubernetesVersion: a.spec.K8sVersion,
		ObservedAt: timestamppb.New(now)}
	if cfg != nil {
		st.ConfigDigest = cfg.GetConfigDigest()
		for _, b := range cfg.GetBundles() {
			ab := &fleetv1.AppliedBundle{Bundle: b.GetBundle(), Revision: b.GetRevision(), Digest: b.GetDigest()}
			for _, o := range b.GetObjects() {
				res := &fleetv1.ObjectResult{Object: o, Result: fleetv1.ApplyResult_APPLY_RESULT_APPLIED}
				if a.spec.DriftObject != "" && a.spec.DriftObject == o.GetKind()+"/"+o.GetName() {
					res.Result = fleetv1.ApplyResult_APPLY_RESULT_DRIFT_REVERTED
					res.Message = "spec edited in the cluster by kubectl; reverted to the hub's revision"
				}
				if a.spec.RefuseObject != "" && a.spec.RefuseObject == o.GetKind()+"/"+o.GetName() {
					res.Result, res.Message = fleetv1.ApplyResult_APPLY_RESULT_REFUSED, a.spec.RefuseMessage
				}
				ab.Objects = append(ab.Objects, res)
			}
			st.Bundles = append(st.Bundles, ab)
		}
	}
	for _, inv := range a.spec.Inventories {
		cond := &fleetv1.Condition{Type: "Ready", Status: "True", Reason: "Exported", Message: "last export succeeded",
			LastTransitionTime: timestamppb.New(now.Add(-time.Hour))}
		if inv.NotReady != "" {
			cond.Status, cond.Reason, cond.Message = "False", inv.NotReady, "export failing: see the sinks"
		}
		degraded := &fleetv1.Condition{Type: "Degraded", Status: "False", Reason: "AsExpected", Message: "every target is readable",
			LastTransitionTime: timestamppb.New(now.Add(-time.Hour))}
		if inv.Degraded != "" {
			degraded.Status, degraded.Reason, degraded.Message = "True", inv.Degraded, "a target's resources may not be listed: its rows are the last known ones"
		}
		coverage := inv.Coverage
		if coverage == nil {
			coverage = []*fleetv1.TargetCoverage{{Target: inv.Namespace + "/all-" + inv.Name, State: "complete", Rows: inv.count(a.start, now)}}
		}
		st.Inventories = append(st.Inventories, &fleetv1.InventoryStatus{Namespace: inv.Namespace, Name: inv.Name,
			ItemCount: inv.count(a.start, now), Conditions: []*fleetv1.Condition{cond, degraded}, Coverage: coverage})
	}
	for _, s := range a.spec.Sinks {
		ss := &fleetv1.SinkStatus{Kind: s.Kind, Namespace: s.Namespace, Name: s.Name, Type: s.Type,
			LastAttemptTime: timestamppb.New(now), LastError: s.Error, ErrorClass: s.Class, NotFound: s.NotFound}
		if s.NotFound {
			ss.LastAttemptTime = nil // nothing is called that does not exist
		}
		if s.Age >= 0 {
			ss.LastSuccessTime = timestamppb.New(now.Add(-s.Age).Truncate(exportEvery))
		}
		st.Sinks = append(st.Sinks, ss)
	}
	return a.call(func(api fleetv1connect.AgentServiceClient) error {
		_, err := api.ReportStatus(ctx, connect.NewRequest(&fleetv1.ReportStatusRequest{Status: st}))
		return err
	})
}
