package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/util/validation"

	"kollect.dev/hub/internal/agentstatus"
	"kollect.dev/hub/internal/auth"
	"kollect.dev/hub/internal/health"
	"kollect.dev/hub/internal/labelsel"
	"kollect.dev/hub/internal/store"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"
)

// agentService implements AgentService.
type agentService struct{ s *Server }

var _ fleetv1connect.AgentServiceHandler = (*agentService)(nil)

// Register implements AgentService.
func (a *agentService) Register(ctx context.Context, req *connect.Request[fleetv1.RegisterRequest]) (*connect.Response[fleetv1.RegisterResponse], error) {
	m := req.Msg
	if errs := validation.IsDNS1123Label(m.GetClusterName()); len(errs) > 0 {
		return nil, invalid("cluster_name %q: %s", m.GetClusterName(), strings.Join(errs, ", "))
	}
	if err := labelsel.ValidateLabels(m.GetLabels()); err != nil {
		return nil, invalid("labels: %v", err)
	}
	if m.GetBootstrapToken() == "" {
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("bootstrap_token is required"))
	}
	keyHash, err := registrationKeyHash(m.GetRegistrationKey())
	if err != nil {
		return nil, err
	}
	// The token is checked, reading only, before anything takes the store's write lock: a
	// flood of registrations with bad tokens costs reads, never the lock every agent needs.
	now := a.s.cfg.Now()
	retrySince := now.Add(-a.s.cfg.RegisterRetryWindow)
	err = a.s.store.BootstrapTokenUsable(ctx, auth.Hash(m.GetBootstrapToken()), now)
	if errors.Is(err, store.ErrTokenInvalid) {
		// A used-up token may still complete its own registration again: the agent that got
		// a credential but could not store it retries with the same token.
		retry, rerr := a.s.store.RegistrationRetryable(ctx, m.GetClusterName(), auth.Hash(m.GetBootstrapToken()), keyHash, retrySince)
		if rerr != nil {
			return nil, storeError(rerr)
		}
		if retry {
			err = nil
		}
	}
	if err != nil {
		if errors.Is(err, store.ErrTokenInvalid) {
			// Logged, audited and counted against the caller's address by auth.AgentAuth.
			return nil, connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("registering cluster %s: %w",
				m.GetClusterName(), store.ErrTokenInvalid))
		}
		return nil, storeError(err)
	}
	// A revoked name is refused by a read too: retrying agents of a revoked cluster cost no
	// write transaction.
	if c, err := a.s.store.GetCluster(ctx, m.GetClusterName()); err == nil && c.Revoked && !c.Released {
		if c.Approval == store.ApprovalRejected && c.BootstrapHash == auth.Hash(m.GetBootstrapToken()) {
			return nil, rejectedRegistration(m.GetClusterName())
		}
		return nil, revokedName(m.GetClusterName())
	}
	secret, hash, err := auth.NewSecret(auth.PrefixAgent)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	registered, err := a.s.store.RegisterCluster(ctx, store.RegisterParams{
		TokenHash: auth.Hash(m.GetBootstrapToken()), Name: m.GetClusterName(), Labels: m.GetLabels(),
		CredentialHash: hash, Replace: m.GetReplaceExisting(), AgentVersion: m.GetAgentVersion(),
		KubernetesVersion: m.GetKubernetesVersion(), Now: now, RetrySince: retrySince, KeyHash: keyHash,
		CredentialExpiresAt: now.Add(a.s.cfg.AgentCredentialTTL), Peer: peerHost(req.Peer().Addr),
		RequireApproval: a.s.cfg.RequireApproval,
	}, labelsel.Match)
	switch {
	case errors.Is(err, store.ErrTokenInvalid):
		return nil, connect.NewError(connect.CodeUnauthenticated, store.ErrTokenInvalid)
	case errors.Is(err, store.ErrTokenBinding):
		// The store's message says what the token allows; the caller holds the token.
		return nil, connect.NewError(connect.CodePermissionDenied, err)
	case errors.Is(err, store.ErrClusterRevoked):
		return nil, revokedName(m.GetClusterName())
	case errors.Is(err, store.ErrRegistrationRejected):
		return nil, rejectedRegistration(m.GetClusterName())
	case errors.Is(err, store.ErrClusterExists):
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("cluster %s is registered to another agent: "+
			"revoke it first, or register with a bootstrap token created with allow_replace and set replace_existing",
			m.GetClusterName()))
	case err != nil:
		return nil, storeError(err)
	}
	// A replaced agent's streams end now; its credential no longer exists.
	a.s.dispatcher.Disconnect(m.GetClusterName(), connect.NewError(connect.CodeUnauthenticated,
		errors.New("this cluster was registered again by another agent")))
	reg := registered.Registration
	if err := a.s.store.AppendAudit(ctx, store.AuditEvent{Actor: "cluster:" + m.GetClusterName(), Action: "Register",
		Target: "cluster/" + m.GetClusterName(), Detail: fmt.Sprintf("labels=%v replace=%v retry=%v agent=%s bootstrap_token=%s peer=%s approval=%s",
			m.GetLabels(), m.GetReplaceExisting(), registered.Retried, m.GetAgentVersion(), reg.TokenID, reg.Peer,
			registered.Approval)}); err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	pending := registered.Approval == store.ApprovalPending
	if pending {
		// A registration that replaced a cluster must not be served that cluster's
		// configuration from the snapshot built before it.
		a.s.dispatcher.Hide(m.GetClusterName())
	}
	a.s.dispatcher.Kick() // its desired bundles are new (none while pending)
	a.s.rollouts.Wake()   // it may join a rollout, or leave one as it waits for approval
	a.s.log.InfoContext(ctx, "agent registered", "cluster", m.GetClusterName(), "labels", m.GetLabels(),
		"agentVersion", m.GetAgentVersion(), "retry", registered.Retried, "bootstrapToken", reg.TokenID, "peer", reg.Peer,
		"pendingApproval", pending)
	a.s.watcher.Poke()
	return connect.NewResponse(&fleetv1.RegisterResponse{ClusterName: m.GetClusterName(), Credential: secret,
		HeartbeatInterval: durationpb.New(a.s.cfg.HeartbeatInterval), CredentialExpiresAt: timestamppb.New(registered.CredentialExpiresAt),
		PendingApproval: pending}), nil
}

// minRegistrationKey is the shortest registration key accepted: 16 bytes of randomness in hex
// or base64 is at least 22 characters.
const minRegistrationKey = 22

// registrationKeyHash is the stored form of a registration key ("" for none); a key too short
// to be unguessable is refused rather than trusted.
func registrationKeyHash(key string) (string, error) {
	if key == "" {
		return "", nil
	}
	if len(key) < minRegistrationKey {
		return "", invalid("registration_key: %d characters, want at least %d (16 random bytes)", len(key), minRegistrationKey)
	}
	return auth.Hash(key), nil
}

// WatchConfig implements AgentService.
func (a *agentService) WatchConfig(ctx context.Context, req *connect.Request[fleetv1.WatchConfigRequest], stream *connect.ServerStream[fleetv1.WatchConfigResponse]) error {
	agent, ok := auth.AgentFrom(ctx)
	if !ok {
		return connect.NewError(connect.CodeUnauthenticated, errors.New("no agent identity"))
	}
	if err := a.checkName(ctx, agent.Name, req.Msg.GetClusterName()); err != nil {
		return err
	}
	// An agent needs one stream (two for a moment while it reconnects); a cap keeps a stolen
	// or buggy credential from holding thousands of goroutines and sockets.
	conn, leave, ok := a.s.dispatcher.SubscribeAtMost(agent.Name, a.s.cfg.MaxStreamsPerAgent)
	if !ok {
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("cluster %s already holds %d configuration streams on this hub replica; "+
			"close one (the agent needs one) and retry", agent.Name, a.s.cfg.MaxStreamsPerAgent))
	}
	defer leave()
	// A rotation keeps the stream: it ends (conn.Done) only when the credential it was
	// opened with no longer works (streamChecks).
	defer a.s.streamChecks.add(conn, auth.PresentedCredential(ctx))()
	sent := ""
	for {
		// Not known to the snapshot yet (just registered): Subscribe kicked a new one, which
		// wakes this stream.
		if cfg, ok := a.s.dispatcher.Current(agent.Name); ok && cfg.GetConfigDigest() != sent {
			if err := stream.Send(cfg); err != nil {
				return err
			}
			sent = cfg.GetConfigDigest()
			conn.Sent(sent)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-conn.Done:
			return conn.Err()
		case <-conn.Wake:
		case p := <-conn.Previews:
			if err := a.sendPreview(ctx, stream, conn, p); err != nil {
				return err
			}
			sent = conn.LastSent()
		}
	}
}

// ReportStatus implements AgentService.
func (a *agentService) ReportStatus(ctx context.Context, req *connect.Request[fleetv1.ReportStatusRequest]) (*connect.Response[fleetv1.ReportStatusResponse], error) {
	agent, ok := auth.AgentFrom(ctx)
	if !ok {
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("no agent identity"))
	}
	if err := a.checkName(ctx, agent.Name, req.Msg.GetClusterName()); err != nil {
		return nil, err
	}
	st := req.Msg.GetStatus()
	if st == nil {
		return nil, invalid("status is required")
	}
	stored, err := agentstatus.Encode(st)
	if err != nil {
		return nil, invalid("status: %v", err)
	}
	applied := map[string]int64{}
	for _, b := range st.GetBundles() {
		applied[b.GetBundle()] = b.GetRevision()
	}
	now := a.s.cfg.Now()
	sum := health.Summarize(st)
	record := store.HeartbeatRecord{AgentVersion: st.GetAgentVersion(), AppliedDigest: st.GetConfigDigest(),
		Inventories: sum.Inventories, Items: sum.Items, InventoriesNotReady: sum.InventoriesNotReady,
		SinkErrors: sum.SinkErrors}
	// The state is the cluster's before this heartbeat (does it end a silence?), from the
	// previous heartbeat as stored: the authenticated copy of the cluster is cached.
	stateAt := func(previous time.Time) string {
		return stateNames[health.State(store.Cluster{LastHeartbeat: previous}, now, a.s.cfg.Thresholds)]
	}
	err = a.s.store.RecordHeartbeat(ctx, store.Heartbeat{Cluster: agent.Name, At: now, AgentVersion: st.GetAgentVersion(),
		KubernetesVersion: st.GetKubernetesVersion(), AppliedDigest: st.GetConfigDigest(), Applied: applied, Status: stored,
		Record: record, StateAt: stateAt, Credential: auth.StoreCheck(ctx), Presented: auth.PresentedCredential(ctx)})
	if errors.Is(err, store.ErrCredentialChanged) {
		return nil, err // authenticated from an out-of-date cache: AgentAuth checks it afresh
	}
	if errors.Is(err, store.ErrNotFound) {
		// Revoked between authentication and now.
		return nil, connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("agent of cluster %s is revoked", agent.Name))
	}
	if err != nil {
		return nil, storeError(err)
	}
	a.s.rollouts.Wake() // the heartbeat may pass or fail a rollout's gates
	cfg, ok := a.s.dispatcher.Current(agent.Name)
	if !ok {
		if cfg, err = a.s.builder.ForCluster(ctx, agent.Name); err != nil {
			return nil, connect.NewError(connect.CodeUnavailable, err)
		}
	}
	expires, rotate := a.credentialDue(agent, auth.PresentedCredential(ctx), now)
	return connect.NewResponse(&fleetv1.ReportStatusResponse{HeartbeatInterval: durationpb.New(a.s.cfg.HeartbeatInterval),
		DesiredConfigDigest: cfg.GetConfigDigest(), HubTime: timestamppb.New(now),
		CredentialExpiresAt: expires, RotateCredential: rotate}), nil
}

// checkName refuses a call from an agent running with another cluster name than the one its
// credential was issued for: its rows would be exported under one name while the hub reports,
// configures and gates them under the other. An empty name (an agent older than the check) is
// not checked.
func (a *agentService) checkName(ctx context.Context, credential, running string) error {
	if running == "" || running == credential {
		return nil
	}
	a.s.log.WarnContext(ctx, "agent refused: its cluster name is not its credential's", "cluster", credential, "clusterName", running)
	return nameMismatch(credential, running)
}

// nameMismatch is the refusal checkName returns; the agent prints it and exits.
func nameMismatch(credential, running string) error {
	return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("this agent runs with --cluster-name %s, but its hub "+
		"credential was issued for cluster %s: start it with --cluster-name %s, or register it as %s with a bootstrap token "+
		"after deleting its credential Secret (the hub keeps cluster %s until an admin deletes it)",
		running, credential, credential, running, credential))
}

// revokedName is the refusal of a registration under a revoked name that was not released.
func revokedName(name string) error {
	return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("cluster %s was revoked: an admin must release its name "+
		"before an agent may register it again (kollect hub agent release %s)", name, name))
}
