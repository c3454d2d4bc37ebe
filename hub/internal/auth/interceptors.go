package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"kollect.dev/hub/internal/store"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"
)

type ctxKey int

const (
	clusterKey ctxKey = iota
	credentialKey
	principalKey
	noteKey
	storeCheckKey
	frontKey
)

// Principal is the API token behind a FleetService call.
type Principal struct {
	TokenID string
	Name    string
	Role    store.Role
}

// Actor is how the principal appears in the audit log.
func (p Principal) Actor() string { return "token:" + p.Name }

// AgentFrom returns the authenticated agent's cluster as it was when the call began: its name,
// revocation and credential fields only (see CredentialCache).
func AgentFrom(ctx context.Context) (store.Cluster, bool) {
	c, ok := ctx.Value(clusterKey).(store.Cluster)
	return c, ok
}

// PresentedCredential is the hash of the credential the agent's call was authenticated with:
// the cluster's current credential, or the previous one during a rotation's grace period.
func PresentedCredential(ctx context.Context) string {
	h, _ := ctx.Value(credentialKey).(string)
	return h
}

// StoreCheck returns, for a call authenticated from the cache without reading the cluster
// epoch (see storeChecked), the credential its store statement must find unchanged
// (store.Heartbeat.Credential); nil for a call checked against the current epoch.
func StoreCheck(ctx context.Context) *store.CredentialFacts {
	f, ok := ctx.Value(storeCheckKey).(store.CredentialFacts)
	if !ok {
		return nil
	}
	return &f
}

// CredentialValid says whether presented (a credential hash) lets an agent of c call now: it
// must be c's current credential before it expires, or the previous one of a rotation before
// its grace period ends, and c must not be revoked.
func CredentialValid(c store.Cluster, presented string, now time.Time) error {
	switch {
	case c.Revoked:
		return connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("agent of cluster %s is revoked", c.Name))
	case presented == c.CredentialHash:
		if !c.CredentialExpiresAt.IsZero() && !now.Before(c.CredentialExpiresAt) {
			return connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("the agent credential of cluster %s expired at %s "+
				"without being rotated: register the agent again with a bootstrap token that allows replacement",
				c.Name, c.CredentialExpiresAt.Format(time.RFC3339)))
		}
		return nil
	case presented != "" && presented == c.PreviousCredentialHash:
		if !now.Before(c.PreviousExpiresAt) {
			return connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("this agent credential of cluster %s was rotated "+
				"and its grace period ended at %s: use the new one", c.Name, c.PreviousExpiresAt.Format(time.RFC3339)))
		}
		return nil
	}
	return connect.NewError(connect.CodeUnauthenticated, errors.New("unknown or replaced agent credential"))
}

// PrincipalFrom returns the authenticated FleetService caller.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey).(Principal)
	return p, ok
}

// note collects what a mutating handler changed, for its audit event.
type note struct {
	mu             sync.Mutex
	target, detail string
}

// Note records the target and detail of the audit event written when the current mutation
// succeeds. Handlers call it; outside a FleetService mutation it does nothing.
func Note(ctx context.Context, target, detail string) {
	if n, ok := ctx.Value(noteKey).(*note); ok {
		n.mu.Lock()
		n.target, n.detail = target, detail
		n.mu.Unlock()
	}
}

func bearer(h http.Header) (string, bool) {
	v := h.Get("Authorization")
	token, ok := strings.CutPrefix(v, "Bearer ")
	return strings.TrimSpace(token), ok && strings.TrimSpace(token) != ""
}

// AgentAuth authenticates AgentService calls (all but Register) by the agent credential.
// Register is authenticated by the bootstrap token in its body, in the handler; AgentAuth
// applies the per-address registration limit to it first.
type AgentAuth struct {
	// Credentials resolves credentials to clusters.
	Credentials *CredentialCache
	// Guard limits, logs and audits refused calls (never the credential).
	Guard *Guard
}

var _ connect.Interceptor = (*AgentAuth)(nil)

func (a *AgentAuth) authenticate(ctx context.Context, h http.Header) (context.Context, error) {
	cred, ok := bearer(h)
	if !ok {
		return ctx, connect.NewError(connect.CodeUnauthenticated, errors.New("missing agent credential (Authorization: Bearer)"))
	}
	c, err := a.Credentials.Verify(ctx, Hash(cred), 0, a.Guard.Now())
	if err != nil {
		return ctx, err
	}
	ctx = context.WithValue(context.WithValue(ctx, clusterKey, c), credentialKey, Hash(cred))
	// A store write of this call checks nothing more: the credential was checked against the
	// current epoch (this also clears a cached check made earlier in the call).
	return context.WithValue(ctx, storeCheckKey, nil), nil
}

// storeChecked are the agent procedures whose handler hands the credential it was
// authenticated with to its store write (StoreCheck), which refuses it there if it changed:
// the heartbeat, every agent's call a minute. They are authenticated from the cache without
// reading the cluster epoch first — a round trip per heartbeat on PostgreSQL — and a
// credential revoked or replaced through another replica is still refused at its next call,
// by the write. When the write finds the credential changed (store.ErrCredentialChanged),
// the call is authenticated again as any other call is and runs once more.
var storeChecked = map[string]bool{fleetv1connect.AgentServiceReportStatusProcedure: true}

// authenticateCached is authenticate from the cache alone, for storeChecked procedures;
// false when the cache holds no entry for the credential or the entry does not let it call,
// so that a refusal is always decided on a fresh read.
func (a *AgentAuth) authenticateCached(ctx context.Context, h http.Header) (context.Context, bool) {
	cred, ok := bearer(h)
	if !ok {
		return ctx, false
	}
	hash := Hash(cred)
	c, ok := a.Credentials.Cached(hash)
	if !ok || CredentialValid(c, hash, a.Guard.Now()) != nil {
		return ctx, false
	}
	ctx = context.WithValue(context.WithValue(ctx, clusterKey, c), credentialKey, hash)
	return context.WithValue(ctx, storeCheckKey, store.CredentialFactsOf(c)), true
}

// Authenticate decides an AgentService call from its headers alone, before anything reads
// its body: Register takes one registration from the address's budget (its bootstrap token is
// in the body, checked by the handler); every other procedure needs a valid agent credential.
// A refusal is logged, audited and counted by the Guard.
func (a *AgentAuth) Authenticate(ctx context.Context, procedure, peer string, h http.Header) (context.Context, error) {
	if procedure == fleetv1connect.AgentServiceRegisterProcedure {
		// A flood of registrations from one address costs neither store reads nor the
		// write lock.
		if err := a.Guard.AllowRegister(peer); err != nil {
			return ctx, err
		}
		return front(ctx), nil
	}
	if storeChecked[procedure] {
		if cached, ok := a.authenticateCached(ctx, h); ok {
			return front(cached), nil
		}
	}
	ctx, err := a.authenticate(ctx, h)
	if err != nil {
		return ctx, a.Guard.Reject(ctx, procedure, peer, h, err)
	}
	return front(ctx), nil
}

// WrapUnary implements connect.Interceptor. Calls Authenticate admitted already (the hub's
// HTTP front runs it on the headers) are not authenticated again.
func (a *AgentAuth) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		procedure, peer := req.Spec().Procedure, req.Peer().Addr
		if !fronted(ctx) {
			var err error
			if ctx, err = a.Authenticate(ctx, procedure, peer, req.Header()); err != nil {
				return nil, err
			}
		}
		resp, err := next(ctx, req)
		switch {
		case err == nil:
			return resp, nil
		case procedure == fleetv1connect.AgentServiceRegisterProcedure:
			// Authenticated by the bootstrap token in its body: the handler's refusal is
			// the failed authentication.
			return resp, a.Guard.Reject(ctx, procedure, peer, req.Header(), err)
		case StoreCheck(ctx) != nil && errors.Is(err, store.ErrCredentialChanged):
			// Authenticated from the cache, and the store found the credential changed:
			// decide again on a fresh read, as any other call is.
			ctx, err := a.authenticate(ctx, req.Header())
			if err != nil {
				return nil, a.Guard.Reject(ctx, procedure, peer, req.Header(), err)
			}
			return next(ctx, req)
		}
		return resp, err
	}
}

// WrapStreamingClient implements connect.Interceptor.
func (a *AgentAuth) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler implements connect.Interceptor.
func (a *AgentAuth) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if fronted(ctx) {
			return next(ctx, conn)
		}
		ctx, err := a.authenticate(ctx, conn.RequestHeader())
		if err != nil {
			return a.Guard.Reject(ctx, conn.Spec().Procedure, conn.Peer().Addr, conn.RequestHeader(), err)
		}
		return next(ctx, conn)
	}
}

// FleetAuth authenticates FleetService calls by API token, checks the role each procedure
// needs (unknown procedures are refused) and audits successful mutations.
type FleetAuth struct {
	Store store.Store
	Log   *slog.Logger
	// Guard limits, logs and audits refused calls (never the token).
	Guard *Guard
}

var _ connect.Interceptor = (*FleetAuth)(nil)

type rule struct {
	role     store.Role
	mutation bool
	// readOnly, when set, says that this request only reads (a dry run): it then needs only
	// the viewer role and is not audited.
	readOnly func(msg any) bool
}

// dryRun reports whether a request asks for a dry run.
func dryRun(msg any) bool {
	d, ok := msg.(interface{ GetDryRun() bool })
	return ok && d.GetDryRun()
}

// rules is the authorisation table: the minimum role of every FleetService procedure and
// whether it changes state (and so is audited).
var rules = map[string]rule{
	fleetv1connect.FleetServiceListClustersProcedure:        {store.RoleViewer, false, nil},
	fleetv1connect.FleetServiceGetClusterProcedure:          {store.RoleViewer, false, nil},
	fleetv1connect.FleetServiceListHeartbeatsProcedure:      {store.RoleViewer, false, nil},
	fleetv1connect.FleetServiceRevokeAgentProcedure:         {store.RoleAdmin, true, nil},
	fleetv1connect.FleetServiceReleaseClusterProcedure:      {store.RoleAdmin, true, nil},
	fleetv1connect.FleetServiceApproveClusterProcedure:      {store.RoleAdmin, true, nil},
	fleetv1connect.FleetServiceRejectClusterProcedure:       {store.RoleAdmin, true, nil},
	fleetv1connect.FleetServiceSetClusterLabelsProcedure:    {store.RoleOperator, true, nil},
	fleetv1connect.FleetServiceDeleteClusterProcedure:       {store.RoleAdmin, true, nil},
	fleetv1connect.FleetServiceApplyBundleProcedure:         {store.RoleOperator, true, nil},
	fleetv1connect.FleetServiceListBundlesProcedure:         {store.RoleViewer, false, nil},
	fleetv1connect.FleetServiceGetBundleProcedure:           {store.RoleViewer, false, nil},
	fleetv1connect.FleetServiceListBundleRevisionsProcedure: {store.RoleViewer, false, nil},
	fleetv1connect.FleetServiceDiffBundleRevisionsProcedure: {store.RoleViewer, false, nil},
	fleetv1connect.FleetServiceDeleteBundleProcedure:        {store.RoleOperator, true, nil},
	// A preview changes nothing on the clusters, but it makes agents work and reads what
	// their clusters hold: operators only, and audited.
	fleetv1connect.FleetServicePreviewBundleProcedure:        {store.RoleOperator, true, nil},
	fleetv1connect.FleetServiceGetPreviewProcedure:           {store.RoleOperator, false, nil},
	fleetv1connect.FleetServiceCreateBootstrapTokenProcedure: {store.RoleAdmin, true, nil},
	fleetv1connect.FleetServiceListBootstrapTokensProcedure:  {store.RoleAdmin, false, nil},
	fleetv1connect.FleetServiceRevokeBootstrapTokenProcedure: {store.RoleAdmin, true, nil},
	fleetv1connect.FleetServiceCreateAPITokenProcedure:       {store.RoleAdmin, true, nil},
	fleetv1connect.FleetServiceListAPITokensProcedure:        {store.RoleAdmin, false, nil},
	fleetv1connect.FleetServiceRevokeAPITokenProcedure:       {store.RoleAdmin, true, nil},
	fleetv1connect.FleetServiceWhoAmIProcedure:               {store.RoleViewer, false, nil},
	fleetv1connect.FleetServiceGetFleetHealthProcedure:       {store.RoleViewer, false, nil},
	fleetv1connect.FleetServiceWatchFleetProcedure:           {store.RoleViewer, false, nil},
	fleetv1connect.FleetServiceListAuditEventsProcedure:      {store.RoleViewer, false, nil},
	// A dry-run StartRollout only plans, so viewers may ask for it.
	fleetv1connect.FleetServiceStartRolloutProcedure:    {store.RoleOperator, true, dryRun},
	fleetv1connect.FleetServiceGetRolloutProcedure:      {store.RoleViewer, false, nil},
	fleetv1connect.FleetServiceListRolloutsProcedure:    {store.RoleViewer, false, nil},
	fleetv1connect.FleetServicePauseRolloutProcedure:    {store.RoleOperator, true, nil},
	fleetv1connect.FleetServiceResumeRolloutProcedure:   {store.RoleOperator, true, nil},
	fleetv1connect.FleetServiceAbortRolloutProcedure:    {store.RoleOperator, true, nil},
	fleetv1connect.FleetServiceRollbackRolloutProcedure: {store.RoleOperator, true, nil},
}

// Authorize decides a FleetService call from its headers alone, before anything reads its
// body: the procedure must be known, the API token valid, and its role at least the least
// role the procedure can need (a dry run may need less than the change; WrapUnary checks the
// message's own). A refusal is logged, audited and counted by the Guard.
func (f *FleetAuth) Authorize(ctx context.Context, procedure, peer string, h http.Header) (context.Context, error) {
	ctx, _, err := f.authorize(ctx, procedure, h, nil)
	if err != nil {
		return ctx, f.Guard.Reject(ctx, procedure, peer, h, err)
	}
	return front(ctx), nil
}

// authorize resolves the token (or takes the principal the front resolved) and checks its
// role for the procedure; msg is the request message of a unary call, nil for streams and for
// the front, which then checks the least role the procedure can need.
func (f *FleetAuth) authorize(ctx context.Context, procedure string, h http.Header, msg any) (context.Context, rule, error) {
	r, known := rules[procedure]
	if !known {
		return ctx, r, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("procedure %s is not authorised for anyone", procedure))
	}
	if r.readOnly != nil && (msg == nil || r.readOnly(msg)) {
		r.role, r.mutation = store.RoleViewer, false
	}
	p, ok := PrincipalFrom(ctx)
	if !ok || !fronted(ctx) {
		var err error
		if p, err = f.identify(ctx, h); err != nil {
			return ctx, r, err
		}
	}
	if p.Role < r.role {
		return ctx, r, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s needs role %s; token %q is %s",
			procedureName(procedure), RoleName(r.role), p.Name, RoleName(p.Role)))
	}
	return context.WithValue(ctx, principalKey, p), r, nil
}

// identify resolves the API token of a call.
func (f *FleetAuth) identify(ctx context.Context, h http.Header) (Principal, error) {
	secret, ok := bearer(h)
	if !ok {
		return Principal{}, connect.NewError(connect.CodeUnauthenticated, errors.New("missing API token (Authorization: Bearer)"))
	}
	tok, err := f.Store.APITokenByHash(ctx, Hash(secret))
	if errors.Is(err, store.ErrNotFound) {
		return Principal{}, connect.NewError(connect.CodeUnauthenticated, errors.New("unknown or revoked API token"))
	}
	if err != nil {
		return Principal{}, connect.NewError(connect.CodeUnavailable, fmt.Errorf("checking API token: %w", err))
	}
	if err := TokenExpired(tok, f.Guard.Now()); err != nil {
		return Principal{}, connect.NewError(connect.CodeUnauthenticated, err)
	}
	return Principal{TokenID: tok.ID, Name: tok.Name, Role: tok.Role}, nil
}

// TokenExpired says why an API token no longer works at now, or returns nil.
func TokenExpired(tok store.APIToken, now time.Time) error {
	if !tok.ExpiresAt.IsZero() && !now.Before(tok.ExpiresAt) {
		return fmt.Errorf("API token %q expired at %s", tok.Name, tok.ExpiresAt.Format(time.RFC3339))
	}
	return nil
}

func procedureName(procedure string) string {
	return procedure[strings.LastIndex(procedure, "/")+1:]
}

// WrapUnary implements connect.Interceptor.
func (f *FleetAuth) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		procedure := req.Spec().Procedure
		ctx, r, err := f.authorize(ctx, procedure, req.Header(), req.Any())
		if err != nil {
			return nil, f.Guard.Reject(ctx, procedure, req.Peer().Addr, req.Header(), err)
		}
		if !r.mutation {
			return next(ctx, req)
		}
		n := &note{}
		resp, err := next(context.WithValue(ctx, noteKey, n), req)
		if err != nil {
			return resp, err
		}
		p, _ := PrincipalFrom(ctx)
		n.mu.Lock()
		ev := store.AuditEvent{Actor: p.Actor(), Action: procedureName(procedure), Target: n.target, Detail: n.detail}
		n.mu.Unlock()
		// The audit write must not be cancelled by a client that hangs up after the change.
		if err := f.Store.AppendAudit(context.WithoutCancel(ctx), ev); err != nil {
			f.Log.ErrorContext(ctx, "audit write failed after a successful change", "action", ev.Action,
				"actor", ev.Actor, "target", ev.Target, "error", err)
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("the change was applied but not audited: %w", err))
		}
		return resp, nil
	}
}

// WrapStreamingClient implements connect.Interceptor.
func (f *FleetAuth) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler implements connect.Interceptor. Streams only read.
func (f *FleetAuth) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		ctx, r, err := f.authorize(ctx, conn.Spec().Procedure, conn.RequestHeader(), nil)
		if err != nil {
			return f.Guard.Reject(ctx, conn.Spec().Procedure, conn.Peer().Addr, conn.RequestHeader(), err)
		}
		if r.mutation {
			return connect.NewError(connect.CodeInternal, errors.New("streaming mutations are not supported"))
		}
		return next(ctx, conn)
	}
}
