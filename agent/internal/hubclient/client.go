package hubclient

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/hubdial"
	kollectv1 "kollect.dev/api/v1alpha1"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"
)

// Client is the agent's side of the hub protocol. It runs on the elected leader only.
type Client struct {
	o       Options
	c       client.Client
	reader  client.Reader
	cache   cache.Cache
	cfg     *rest.Config
	applier *Applier
	conn    *hubdial.Conn
	api     fleetv1connect.AgentServiceClient
	// replica is the hub replica the last config stream reached (configLoop only).
	replica string
	// previewing holds a token while a bundle preview is evaluated (see startPreview).
	previewing chan struct{}

	// rotating is held while a credential rotation runs: heartbeats from several goroutines
	// may each be asked to rotate, and one rotation is enough.
	rotating sync.Mutex

	mu sync.Mutex
	// refusal is the hub's refusal of this agent's cluster name (see refused); stopLoops ends
	// Start's loops once it is set.
	refusal    error
	stopLoops  context.CancelFunc
	credential string
	heartbeat  time.Duration
	k8sVersion string
	// registrationKey is sent with every registration this process makes: a retry after the
	// credential could not be stored presents it again, and the hub completes the
	// registration only for the holder of the same key (not for another holder of a
	// multi-use bootstrap token).
	registrationKey string
}

// New returns a hub client. reader must be uncached: the agent reads its own Secrets only.
func New(o Options, cfg *rest.Config, c client.Client, reader client.Reader, ca cache.Cache) (*Client, error) {
	if len(o.URLs) == 0 || o.Cluster == "" {
		return nil, errors.New("hub URL and cluster name are required")
	}
	hc := &Client{o: o, c: c, reader: reader, cache: ca, cfg: cfg, heartbeat: defaultHeartbeat,
		applier: NewApplier(c, o), previewing: make(chan struct{}, 1), registrationKey: crand.Text()}
	conn, err := hubdial.New(hubdial.Options{URLs: o.URLs, CAFingerprint: o.CAFingerprint, CAFile: o.CAFile,
		Token: hc.currentCredential})
	if err != nil {
		return nil, fmt.Errorf("hub connection: %w", err)
	}
	hc.conn, hc.api = conn, conn.Agent()
	return hc, nil
}

// NeedLeaderElection: only the leader talks to the hub and applies configuration.
func (h *Client) NeedLeaderElection() bool { return true }

func (h *Client) currentCredential() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.credential
}

// Start registers if needed, then holds the config stream and sends heartbeats until ctx ends.
// Errors reaching the hub are retried; the agent keeps its last configuration meanwhile. It
// returns an error, which stops the agent, when the hub refuses the agent's cluster name: the
// stored credential was issued for another one.
func (h *Client) Start(ctx context.Context) error {
	if v, err := discovery.NewDiscoveryClientForConfigOrDie(h.cfg).ServerVersion(); err == nil {
		h.k8sVersion = v.GitVersion
	}
	if err := h.watchDrift(ctx); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		err := h.ensureCredential(ctx)
		if err == nil {
			break
		}
		h.o.Log.Error(err, "registering with the hub")
		if !sleep(ctx, backoff(attempt)) {
			return nil
		}
	}
	loops, stop := context.WithCancel(ctx)
	defer stop()
	h.mu.Lock()
	h.stopLoops = stop
	h.mu.Unlock()
	// The first heartbeat goes out before the stream opens, so that an agent started with
	// the wrong name stops before it applies anything.
	h.sendHeartbeat(loops)
	if err := h.refusedErr(); err != nil {
		return err
	}
	go h.heartbeatLoop(loops)
	// Failed bundle objects are retried beside the stream: the hub sends a revision once.
	go h.applier.RunRetries(loops, func() { h.sendHeartbeat(loops) })
	h.configLoop(loops)
	return h.refusedErr()
}

func (h *Client) refusedErr() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.refusal
}

// refused reports whether err is the hub's refusal of this agent's cluster name (ReportStatus
// and WatchConfig fail with FailedPrecondition for nothing else), and if so ends Start with it.
func (h *Client) refused(err error) bool {
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		return false
	}
	var ce *connect.Error
	msg := err.Error()
	if errors.As(err, &ce) {
		msg = ce.Message()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.refusal == nil {
		h.refusal = fmt.Errorf("the hub refused cluster name %s: %s", h.o.Cluster, msg)
	}
	if h.stopLoops != nil {
		h.stopLoops()
	}
	return true
}

// ensureCredential loads the stored credential, or registers with the bootstrap token.
func (h *Client) ensureCredential(ctx context.Context) error {
	sec := &corev1.Secret{}
	err := h.reader.Get(ctx, h.o.CredentialSecret, sec)
	if err == nil && len(sec.Data["credential"]) > 0 {
		h.mu.Lock()
		h.credential = string(sec.Data["credential"])
		h.mu.Unlock()
		return nil
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading credential Secret %s: %w", h.o.CredentialSecret, err)
	}
	boot := &corev1.Secret{}
	if err := h.reader.Get(ctx, h.o.BootstrapSecret, boot); err != nil {
		return fmt.Errorf("no credential yet and no bootstrap token Secret %s: %w", h.o.BootstrapSecret, err)
	}
	resp, err := h.api.Register(ctx, connect.NewRequest(&fleetv1.RegisterRequest{
		ClusterName: h.o.Cluster, Labels: h.o.Labels, BootstrapToken: string(boot.Data["token"]),
		ReplaceExisting: h.o.ReplaceExisting, AgentVersion: h.o.AgentVersion, KubernetesVersion: h.k8sVersion,
		RegistrationKey: h.registrationKey,
	}))
	if err != nil {
		return fmt.Errorf("registering cluster %s: %w", h.o.Cluster, err)
	}
	cred := resp.Msg.GetCredential()
	// Should this fail, the next attempt registers again with the same token and key, and
	// the hub completes this registration rather than refusing the name.
	if err := h.storeCredential(ctx, cred); err != nil {
		return err
	}
	h.mu.Lock()
	h.credential = cred
	if d := resp.Msg.GetHeartbeatInterval(); d != nil && d.AsDuration() > 0 {
		h.heartbeat = d.AsDuration()
	}
	h.mu.Unlock()
	h.o.Log.Info("registered with the hub", "cluster", h.o.Cluster)
	if resp.Msg.GetPendingApproval() {
		// Said once, where whoever installs the agent looks: otherwise a cluster that receives
		// no bundle looks broken.
		h.o.Log.Info("the hub holds this registration for an admin to approve: until then the cluster reports its status "+
			"but receives no bundle (kollect hub clusters approve "+h.o.Cluster+")", "cluster", h.o.Cluster)
	}
	return nil
}

// storeCredential writes the hub credential into the credential Secret, creating it if needed.
func (h *Client) storeCredential(ctx context.Context, cred string) error {
	sec := &corev1.Secret{}
	err := h.reader.Get(ctx, h.o.CredentialSecret, sec)
	if apierrors.IsNotFound(err) {
		sec = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: h.o.CredentialSecret.Namespace, Name: h.o.CredentialSecret.Name,
			Labels: map[string]string{LabelManagedBy: "kollect-agent"}}, Data: map[string][]byte{"credential": []byte(cred)}}
		err = h.c.Create(ctx, sec)
	} else if err == nil {
		if sec.Data == nil {
			sec.Data = map[string][]byte{}
		}
		sec.Data["credential"] = []byte(cred)
		err = h.c.Update(ctx, sec)
	}
	if err != nil {
		return fmt.Errorf("storing the hub credential in Secret %s: %w", h.o.CredentialSecret, err)
	}
	return nil
}

// rotateCredential gets a new credential from the hub over the open connection, stores it
// and only then uses it: until it is stored the old one keeps working (the hub's grace
// period), and the hub asks again at the next heartbeat.
func (h *Client) rotateCredential(ctx context.Context) {
	if !h.rotating.TryLock() {
		return
	}
	defer h.rotating.Unlock()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := h.api.RotateCredential(cctx, connect.NewRequest(&fleetv1.RotateCredentialRequest{}))
	if connect.CodeOf(err) == connect.CodeFailedPrecondition {
		// A heartbeat sent with the credential just replaced asked again: nothing is due.
		h.o.Log.V(1).Info("credential rotation not due", "reason", err.Error())
		return
	}
	if err != nil {
		h.o.Log.Error(err, "rotating the hub credential; the current one keeps working until it expires")
		return
	}
	if err := h.storeCredential(cctx, resp.Msg.GetCredential()); err != nil {
		h.o.Log.Error(err, "keeping the current hub credential: the rotated one could not be stored",
			"currentValidUntil", resp.Msg.GetPreviousValidUntil().AsTime())
		return
	}
	h.mu.Lock()
	h.credential = resp.Msg.GetCredential()
	h.mu.Unlock()
	h.o.Log.Info("rotated the hub credential", "expires", resp.Msg.GetExpiresAt().AsTime())
}

// configLoop holds the WatchConfig stream, reconnecting with backoff.
func (h *Client) configLoop(ctx context.Context) {
	for attempt := 0; ctx.Err() == nil; {
		received, err := h.watchOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if received {
			attempt = 0
		}
		if connect.CodeOf(err) == connect.CodeUnauthenticated {
			h.o.Log.Error(err, "the hub refused this agent's credential; keeping the last applied configuration")
		} else {
			h.o.Log.Info("config stream ended, reconnecting", "error", fmt.Sprint(err))
		}
		if !sleep(ctx, backoff(attempt)) {
			return
		}
		attempt++
	}
}

func (h *Client) watchOnce(ctx context.Context) (received bool, err error) {
	_, digest, _ := h.applier.Snapshot()
	stream, err := h.api.WatchConfig(ctx, connect.NewRequest(&fleetv1.WatchConfigRequest{AppliedConfigDigest: digest,
		ClusterName: h.o.Cluster}))
	if err != nil {
		h.refused(err)
		return false, err
	}
	defer stream.Close()
	for stream.Receive() {
		if !received && h.conn != nil && h.conn.Current() != h.replica {
			h.replica = h.conn.Current()
			h.o.Log.Info("config stream open", "hub", h.replica)
		}
		received = true
		msg := stream.Msg()
		// A reconnect, or a preview repeating the configuration in force: the cluster already
		// holds it. A preview that comes with a changed configuration applies the change, as
		// any message does; the preview's own manifests are never applied.
		if _, applied, _ := h.applier.Snapshot(); applied != msg.GetConfigDigest() || applied == "" {
			if err := h.applier.Apply(ctx, msg); err != nil {
				h.o.Log.Error(err, "applying hub configuration")
			}
			h.sendHeartbeat(ctx) // tell the hub at once what was applied
		}
		if p := msg.GetPreview(); p != nil {
			h.startPreview(ctx, p)
		}
	}
	h.refused(stream.Err())
	return received, stream.Err()
}

func (h *Client) heartbeatLoop(ctx context.Context) {
	for {
		h.sendHeartbeat(ctx)
		h.mu.Lock()
		d := h.heartbeat
		h.mu.Unlock()
		if !sleep(ctx, d) {
			return
		}
	}
}

func (h *Client) sendHeartbeat(ctx context.Context) {
	invs, sinks, err := collectStatus(ctx, h.c)
	if err != nil {
		h.o.Log.Error(err, "collecting heartbeat status")
	}
	bundles, digest, _ := h.applier.Snapshot()
	req := &fleetv1.ReportStatusRequest{ClusterName: h.o.Cluster, Status: &fleetv1.AgentStatus{
		AgentVersion: h.o.AgentVersion, KubernetesVersion: h.k8sVersion, ConfigDigest: digest,
		Bundles: bundles, Inventories: invs, Sinks: sinks, ObservedAt: timestamppb.Now(),
	}}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := h.api.ReportStatus(cctx, connect.NewRequest(req))
	if h.refused(err) {
		return
	}
	if err != nil {
		h.o.Log.V(1).Info("heartbeat failed", "error", err.Error())
		return
	}
	if d := resp.Msg.GetHeartbeatInterval(); d != nil && d.AsDuration() > 0 {
		h.mu.Lock()
		h.heartbeat = d.AsDuration()
		h.mu.Unlock()
	}
	if resp.Msg.GetRotateCredential() {
		h.rotateCredential(ctx)
	}
}

// watchDrift reverts local edits of hub-managed objects, and re-creates hub-managed objects
// deleted locally, as soon as the agent's cache sees them. Objects are matched against the
// desired configuration, not their labels: removing the managed-by label is drift too.
func (h *Client) watchDrift(ctx context.Context) error {
	for _, k := range kollectv1.Kinds {
		kind, gvk := k.Kind, kollectv1.GroupVersion.WithKind(k.Kind)
		// Typed objects share the informers the agent's controllers already run.
		typed, err := h.c.Scheme().New(gvk)
		if err != nil {
			return fmt.Errorf("kind %s: %w", kind, err)
		}
		inf, err := h.cache.GetInformer(ctx, typed.(client.Object))
		if err != nil {
			return fmt.Errorf("watching %s for drift: %w", kind, err)
		}
		_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			UpdateFunc: func(_, obj any) { h.checkDrift(ctx, gvk, obj) },
			DeleteFunc: func(obj any) { h.checkDeleted(ctx, gvk, obj) },
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (h *Client) checkDrift(ctx context.Context, gvk schema.GroupVersionKind, obj any) {
	cobj, ok := obj.(client.Object)
	if !ok || !h.applier.Managed(gvk, client.ObjectKeyFromObject(cobj)) {
		return
	}
	reverted, err := h.applier.RevertDrift(ctx, identity(gvk, cobj))
	if err != nil {
		h.o.Log.Error(err, "reverting drift")
	}
	if reverted || err != nil {
		h.sendHeartbeat(ctx)
	}
}

func (h *Client) checkDeleted(ctx context.Context, gvk schema.GroupVersionKind, obj any) {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	cobj, ok := obj.(client.Object)
	if !ok || !h.applier.Managed(gvk, client.ObjectKeyFromObject(cobj)) {
		return
	}
	restored, err := h.applier.Restore(ctx, identity(gvk, cobj))
	if err != nil {
		h.o.Log.Error(err, "restoring a hub-managed object deleted locally", "kind", gvk.Kind, "name", nameOf(cobj))
	}
	if restored || err != nil {
		h.sendHeartbeat(ctx)
	}
}

// identity is an object reduced to what names it: the applier reads the rest itself.
func identity(gvk schema.GroupVersionKind, obj client.Object) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	u.SetNamespace(obj.GetNamespace())
	u.SetName(obj.GetName())
	return u
}

func backoff(attempt int) time.Duration {
	d := time.Second << min(attempt, 5)
	d = min(d, maxReconnectInterval)
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
